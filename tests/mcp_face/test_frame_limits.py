"""The face never sends a frame the daemon would refuse for its size (SPEC L-1 to L-3): such
a call is answered ``frame_too_large`` by the face, so it never spends the malformed-frame
budget (L-6) of the one connection every caller of the face shares. Real SDK client and
server, the face's reconnecting link, a daemon on a Unix socket at its default limits."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import trio
from mcp import Client

from csp_web.config import Config
from csp_web.core.api.context import OpContext
from csp_web.core.api.fields import FieldSpec, Params
from csp_web.core.api.ops import Op
from csp_web.core.api.replies import Result
from csp_web.core.daemon.compose import op_table
from csp_web.mcp_face.daemon_link import DaemonLink, open_daemon_link
from csp_web.mcp_face.refresh import ToolSet
from csp_web.mcp_face.serve import daemon_limits
from csp_web.mcp_face.server import build_server, call
from csp_web.mcp_face.tools import build_tools
from protocol import Limits, Task, serialize
from tests.conftest import Daemon, start_daemon
from tests.harness import TEST_OPS, given

from .conftest import WAIT_S

LINE = Limits().max_line_bytes  # the daemon's default, which the face's default matches


async def _note(params: Params, ctx: OpContext, _: Any) -> Result:
    return Result(f"noted:{len(params.text('TEXT'))}", scope=("test",))


# As tool_mcp's PARAMS: as many characters as the line has bytes.
NOTE = Op(
    "note", "TEST", "NOTED", "tool", _note, (FieldSpec("TEXT", required=True, max_chars=LINE),)
)


@asynccontextmanager
async def open_face(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> AsyncIterator[tuple[Client, Daemon, DaemonLink]]:
    daemon = await start_daemon(nursery, config, os.path.join(sock_dir, "csp.sock"), [NOTE])
    entries = [op.describe() for op in op_table([given(None, [NOTE])])]
    tools = build_tools(entries, exec_configured=False, max_timeout_ms=10_000)
    async with open_daemon_link(daemon.socket_path) as link:
        server = build_server(link, ToolSet(tools), max_timeout_ms=10_000)
        async with Client(server) as client:
            yield client, daemon, link


def _error_code(result: Any) -> str | None:
    error = (result.structured_content or {}).get("ERROR")
    return str(error).partition(":")[0] if error else None


async def test_eleven_over_long_calls_are_each_refused_and_the_next_call_is_answered(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    """Before, the daemon answered the first ten and closed the shared connection at the
    eleventh (``too_many_bad_frames``): the eleventh, and any call in flight, failed."""
    text = "\u00e9" * 200_000  # within maxLength (characters), 400,000 bytes on the wire
    with trio.fail_after(WAIT_S):
        async with open_face(nursery, config, sock_dir) as (client, daemon, link):
            for _ in range(12):
                result = await client.call_tool("test_note", {"text": text})
                assert result.is_error
                assert _error_code(result) == "frame_too_large"
            result = await client.call_tool("test_note", {"text": "fits"})
            assert (result.is_error, result.structured_content["DATA"]) == (False, "noted:4")
            assert link.connects == 1
    assert daemon.dispatcher.stats.rejections["frame_too_large"] == 0  # none was sent


def _text_of_line(line_bytes: int) -> str:
    """ASCII text whose TEXT field line is ``line_bytes`` bytes as the face sends it."""
    overhead = (
        len(serialize(Task("note", "TEST", "NOTED", None, (("TEXT", "x"),))).split(b"\n")[1]) - 1
    )
    return "x" * (line_bytes - overhead)


async def test_a_field_line_of_exactly_the_line_limit_is_sent_and_one_byte_more_is_refused(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    """Before, the one byte more was sent, and the daemon counted it as a malformed frame."""
    with trio.fail_after(WAIT_S):
        async with open_face(nursery, config, sock_dir) as (client, daemon, _):
            at_limit = await client.call_tool("test_note", {"text": _text_of_line(LINE)})
            over = await client.call_tool("test_note", {"text": _text_of_line(LINE + 1)})
    assert (at_limit.is_error, _error_code(at_limit)) == (False, None)
    assert (over.is_error, _error_code(over)) == (True, "frame_too_large")
    assert daemon.dispatcher.stats.rejections["frame_too_large"] == 0


class NoDaemon:
    """A daemon the face must not call: any task is a test failure."""

    async def call(self, task: Task, *, timeout_s: float = 60.0) -> Any:
        raise AssertionError(f"sent {task.req}")


async def test_the_face_checks_the_line_limit_of_the_config_it_was_started_with(
    config: Config,
) -> None:
    small = replace(config, connection=replace(config.connection, max_line_bytes=1024))
    (tool,) = build_tools(
        [op.describe() for op in op_table([given(None, [NOTE])])],
        exec_configured=False,
        max_timeout_ms=10_000,
    )
    outcome = await call(
        NoDaemon(),
        tool,
        {"text": "x" * 1024},
        10.0,
        peer_uid=os.getuid(),
        limits=daemon_limits(small),
    )
    assert outcome.is_error
    assert outcome.structured["ERROR"].partition(":")[0] == "frame_too_large"


def test_a_text_argument_that_can_pass_the_line_limit_states_it_in_bytes() -> None:
    """``maxLength`` counts characters: 262144 of them may be 1 MiB on the wire."""
    entries = [op.describe() for op in op_table([given(None, [NOTE, *TEST_OPS])])]
    tools = {t.name: t for t in build_tools(entries, exec_configured=False, max_timeout_ms=1000)}
    note = tools["test_note"].input_schema["properties"]["text"]
    echo = tools["test_echo"].input_schema["properties"]["text"]  # at most 10 characters
    assert note["maxLength"] == LINE
    assert f"{LINE} bytes" in note["description"]
    assert "bytes" not in echo.get("description", "")
