"""The web services the daemon opens once, and the web_op record every web op sends."""

from __future__ import annotations

import json

import pytest

from csp_web.core.api.context import Peer
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import Params
from csp_web.core.api.ops import Op
from csp_web.core.api.replies import Result
from protocol import ErrorCode, Status, Task
from specialists.web.services import WebServices, record_web_op
from tests.harness import outbox_of
from tests.web.conftest import DispatcherFactory


async def test_web_op_record_is_queued_for_memory_on_success_and_failure(
    make_dispatcher: DispatcherFactory, web: WebServices
) -> None:
    async def good(params: Params, ctx: object, services: WebServices) -> Result:
        from csp_web.core.api.context import OpContext

        assert isinstance(ctx, OpContext)
        assert services is web  # bound at composition: the handler's own services
        async with record_web_op(ctx, "probe", "https://origin.test/x") as details:
            details["cache_hit"] = True
        return Result("fine")

    async def bad(params: Params, ctx: object, services: WebServices) -> Result:
        from csp_web.core.api.context import OpContext

        assert isinstance(ctx, OpContext)
        async with record_web_op(ctx, "probe", "https://origin.test/y"):
            raise OpError(ErrorCode.FETCH_FAILED, "timeout")

    dispatcher = make_dispatcher(
        [Op("good", "WEB", "X", "web", good), Op("bad", "WEB", "X", "web", bad)]
    )
    ok = await dispatcher.run(Task("good", "WEB", "X"), Peer("t"))
    fail = await dispatcher.run(Task("bad", "WEB", "X"), Peer("t"))
    assert ok.status is Status.OK
    assert fail.get("ERROR") == "fetch_failed:timeout"
    outbox = outbox_of(dispatcher)
    rows = outbox._store.oldest(100)  # the durable store is what to observe
    records = [json.loads(w.data) for _, w in rows if w.type == "web_op"]
    assert [(r["target"], r["outcome"], r["cache_hit"]) for r in records] == [
        ("https://origin.test/x", "OK", True),
        ("https://origin.test/y", "FAIL fetch_failed", False),
    ]
    assert all(
        w.source == "web" and w.path.startswith("web-ops/") for _, w in rows if w.type == "web_op"
    )


@pytest.mark.parametrize("name", ["fetch", "search:brave", "search:duckduckgo", "api:github"])
async def test_every_configured_backend_and_api_has_a_bucket(web: WebServices, name: str) -> None:
    assert web.limits.bucket(name) is not None
