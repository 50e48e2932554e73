"""SPEC C-6 through the MCP face: a call the MCP client cancels (the SDK client sends
``notifications/cancelled`` when its caller is cancelled) is cancelled in the daemon too, by
``REQ:cancel`` naming the task's ID. Real SDK client and server, the face's reconnecting link
(as ``csp-web mcp --socket``), and a daemon on a Unix socket."""

from __future__ import annotations

import json
import os
from typing import Any

import trio
from mcp import Client

from csp_web.config import Config
from csp_web.core.daemon.compose import op_table
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.mcp_face.daemon_link import open_daemon_link
from csp_web.mcp_face.refresh import ToolSet
from csp_web.mcp_face.server import build_server
from csp_web.mcp_face.tools import build_tools
from tests.conftest import start_daemon, wait_until
from tests.harness import SLEEPS, TEST_OPS, given, outbox_of

from .conftest import WAIT_S

MAX_TIMEOUT_MS = 600_000


def _sleep_audits(dispatcher: Dispatcher) -> list[dict[str, Any]]:
    rows = outbox_of(dispatcher)._store.oldest(10_000)
    records = [json.loads(write.data) for _, write in rows if write.type == "audit"]
    return [record for record in records if record.get("op") == "sleep"]


async def test_a_call_the_mcp_client_cancels_is_cancelled_in_the_daemon(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    """Before, the daemon's task ran on to its deadline (here ten minutes)."""
    daemon = await start_daemon(nursery, config, os.path.join(sock_dir, "csp.sock"), TEST_OPS)
    entries = [op.describe() for op in op_table([given(None, TEST_OPS)])]
    tools = build_tools(entries, exec_configured=False, max_timeout_ms=MAX_TIMEOUT_MS)
    with trio.fail_after(WAIT_S):
        async with open_daemon_link(daemon.socket_path) as link:
            server = build_server(link, ToolSet(tools), max_timeout_ms=MAX_TIMEOUT_MS)
            async with Client(server) as client, trio.open_nursery() as calls:
                arguments = {"ms": MAX_TIMEOUT_MS, "timeout_ms": MAX_TIMEOUT_MS}
                mark = SLEEPS.started
                calls.start_soon(client.call_tool, "test_sleep", arguments)
                await SLEEPS.wait_started(mark + 1)  # bounded by the fail_after above
                calls.cancel_scope.cancel()  # the SDK sends notifications/cancelled
            await wait_until(lambda: _sleep_audits(daemon.dispatcher), timeout_s=WAIT_S)
    (audit,) = _sleep_audits(daemon.dispatcher)
    assert (audit["outcome"], audit["error"]) == ("FAIL", "cancelled:by REQ:cancel")
    assert str(audit["id"]).startswith("mcp-")
