"""The server's conventions through the SDK's in-process client (measured by coverage, which
the stdio tests' child processes are not): annotations on the listed tools, and progress
notifications while a call runs."""

from __future__ import annotations

import trio
from mcp import Client
from mcp.types import CallToolResult, ToolAnnotations

from csp_web.core.daemon.compose import op_table
from csp_web.mcp_face.refresh import ToolSet
from csp_web.mcp_face.server import build_server
from csp_web.mcp_face.tools import build_tools
from protocol import Reply, Status, Task
from specialists.web import WEB

WAIT_S = 10.0


class SlowDaemon:
    """The daemon's side: each task is answered OK after ``delay_s``."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    async def call(self, task: Task, *, timeout_s: float = 60.0) -> Reply:
        await trio.sleep(self.delay_s)
        return Reply(Status.OK, (("SCOPE", "[a.test]"), ("DATA", "done"), ("WORD_COUNT", "1")))


def _server(delay_s: float) -> Client:
    tools = build_tools(
        [op.describe() for op in op_table((WEB,))], exec_configured=False, max_timeout_ms=9000
    )
    return Client(build_server(SlowDaemon(delay_s), ToolSet(tools), max_timeout_ms=9000))


async def test_listed_tools_carry_their_ops_annotations() -> None:
    with trio.fail_after(WAIT_S):
        async with _server(0) as client:
            listed = await client.list_tools()
    hints = {tool.name: tool.annotations for tool in listed.tools}
    assert hints["web_search"] == ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True
    )
    assert hints["web_write_file"] == ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
    )


async def test_a_call_with_a_progress_token_hears_each_second_until_its_reply(
    autojump_clock: trio.abc.Clock,
) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    with trio.fail_after(WAIT_S):
        async with _server(2.5) as client:
            result = await client.call_tool(
                "web_fetch", {"url": "https://a.test/"}, progress_callback=on_progress
            )
            quiet = await client.call_tool("web_fetch", {"url": "https://a.test/"})  # no callback
    assert isinstance(result, CallToolResult)
    assert result.structured_content == {
        "STATUS": "OK",
        "SCOPE": "[a.test]",
        "DATA": "done",
        "WORD_COUNT": 1,
    }
    assert seen == [(1.0, None, "still running, 1 s"), (2.0, None, "still running, 2 s")]
    assert isinstance(quiet, CallToolResult)
    assert len(seen) == 2  # the second call, 2.5 s too, asked for none and got none
