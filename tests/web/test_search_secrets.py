"""A search backend that echoes its API key never gets the key into a reply, a log line or a
memory record (found by the hostile pass: the error code a backend names became the ERROR
detail unredacted, and lower_snake spelling hid the key from the exact-match redaction)."""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Callable

import pytest
import trio

from csp_web.config import Config
from specialists.web.search.ops_search import OPS
from tests.harness import outbox_of
from tests.net._dns import FixedResolver
from tests.net._origin import Origin, Reply, Seen
from tests.web.fixtures import (
    BRAVE_KEY,
    BRAVE_KEY_ENV,
    open_web_dispatcher,
    run,
    web_audits,
    with_search,
)

WAIT_S = 10.0


def _echoing_error(field: str) -> Callable[[Seen], Reply]:
    def route(seen: Seen) -> Reply:
        key = seen.headers.get("x-subscription-token", "")
        error = {"code": "ok", "detail": "ok"}
        error[field] = f"token {key} ({key.upper()}) is not valid"
        body = json.dumps({"type": "ErrorResponse", "error": error}).encode()
        return Reply(401, [("content-type", "application/json")], body)

    return route


def _spellings(key: str) -> list[str]:
    """The key as given, and as lower_snake or case-folded text would carry it."""
    snake = key.lower().replace("-", "_")
    return [key, key.lower(), key.upper(), snake, snake.upper(), key.replace("-", "_")]


@pytest.mark.parametrize("field", ["code", "detail"])
async def test_a_backend_echoing_its_key_in_an_error_leaks_it_nowhere(
    field: str,
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(BRAVE_KEY_ENV, BRAVE_KEY)
    caplog.set_level(logging.DEBUG)
    origin.routes["/brave"] = _echoing_error(field)
    config = with_search(web_config, origin, order=["brave"])
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(dispatcher, "search", "URL_REFS", ("QUERY", "anything"))
        records = [write.data for _, write in outbox_of(dispatcher)._store.oldest(1000)]
        audits = web_audits(dispatcher)
    assert len(audits) == len(records) == 1  # the op's one record: its audit
    assert reply.status.value == "FAIL"
    assert (reply.get("ERROR") or "").partition(":")[0] == "search_api_error", reply
    seen = {
        "reply": "\n".join(f"{k} {v}" for k, v in reply.fields),
        "logs": "\n".join(record.getMessage() for record in caplog.records),
        "records": "\n".join(records),
    }
    for where, text in seen.items():
        for spelling in _spellings(BRAVE_KEY):
            assert spelling not in text, (where, spelling, text)
