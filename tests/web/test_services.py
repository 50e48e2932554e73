"""The web services the daemon opens once, and the one audit record every web op gives."""

from __future__ import annotations

import json

import pytest

from csp_web.core.api.context import Peer
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import Params
from csp_web.core.api.ops import Op
from csp_web.core.api.replies import Result
from protocol import ErrorCode, Status, Task
from specialists.web.services import WebServices, web_audit
from tests.harness import outbox_of
from tests.web.conftest import DispatcherFactory


async def test_a_web_op_gives_one_audit_record_with_its_details_on_success_and_failure(
    make_dispatcher: DispatcherFactory, web: WebServices
) -> None:
    async def good(params: Params, ctx: object, services: WebServices) -> Result:
        assert services is web  # bound at composition: the handler's own services
        with web_audit("https://origin.test/x") as notes:
            notes.cache_hit = True
            return notes.attach(Result("fine"))

    async def bad(params: Params, ctx: object, services: WebServices) -> Result:
        with web_audit("https://origin.test/y") as notes:
            notes.backend = "brave"
            raise OpError(ErrorCode.FETCH_FAILED, "timeout")

    dispatcher = make_dispatcher(
        [Op("good", "WEB", "X", "web", good), Op("bad", "WEB", "X", "web", bad)]
    )
    ok = await dispatcher.run(Task("good", "WEB", "X", None, (("ID", "g-1"),)), Peer("t"))
    fail = await dispatcher.run(Task("bad", "WEB", "X", None, (("ID", "b-1"),)), Peer("t"))
    assert ok.status is Status.OK
    assert fail.get("ERROR") == "fetch_failed:timeout"
    rows = outbox_of(dispatcher)._store.oldest(100)  # the durable store is what to observe
    assert [(w.type, w.source, w.path.split("/")[0]) for _, w in rows] == [
        ("audit", "sys", "audit"),
        ("audit", "sys", "audit"),
    ]
    records = [json.loads(w.data) for _, w in rows]
    details = ("id", "target", "outcome", "error", "cache_hit", "backend", "method")
    assert [tuple(r[k] for k in details) for r in records] == [
        ("g-1", "https://origin.test/x", "OK", None, True, None, None),
        ("b-1", "https://origin.test/y", "FAIL", "fetch_failed:timeout", False, "brave", None),
    ]


@pytest.mark.parametrize("name", ["fetch", "search:brave", "search:duckduckgo", "api:github"])
async def test_every_configured_backend_and_api_has_a_bucket(web: WebServices, name: str) -> None:
    assert web.limits.bucket(name) is not None
