"""The face's tool list follows its daemon's op table: a daemon that comes back (behind the
link's reconnect) with other ops is read again, the new tools are listed, and the MCP client
is told with ``notifications/tools/list_changed`` (handshake era) or the ``tools_list_changed``
event of its ``subscriptions/listen`` stream (2026 era); the face declares ``listChanged``.

Before, the face read the table once at start and listed the old tools for its whole life.
Tested with the SDK's stdio client spawning ``python -m csp_web mcp --socket``, against real
daemons on that socket; the interval bound with a scripted op table and the autojump clock.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import trio
from mcp import Client, StdioServerParameters
from mcp.client.session import IncomingMessage
from mcp.types import ToolListChangedNotification

from csp_web.config import Config
from csp_web.core.api.ops import Op
from csp_web.mcp_face.refresh import ToolSet, keep_tools_fresh, refresh
from csp_web.mcp_face.tools import build_tools, parse_op_table
from protocol import Reply, Status
from tests.conftest import start_daemon
from tests.harness import TEST_OPS

from .conftest import WAIT_S, face_command, face_env

ECHO_ONLY = [op for op in TEST_OPS if op.req == "echo"]


async def _serve(
    nursery: trio.Nursery, config: Config, path: str, ops: Sequence[Op[Any]]
) -> Callable[[], Awaitable[None]]:
    """A daemon with ``ops`` on ``path``; the function returned stops it and returns once its
    listener has closed."""
    stopped = trio.Event()
    scope = trio.CancelScope()

    async def run(*, task_status: trio.TaskStatus[None]) -> None:
        try:
            with scope:
                async with trio.open_nursery() as inner:
                    await start_daemon(inner, config, path, list(ops))
                    task_status.started()
                    await trio.sleep_forever()
        finally:
            stopped.set()

    await nursery.start(run)

    async def stop() -> None:
        scope.cancel()
        await stopped.wait()

    return stop


def _face(path: str, **options: Any) -> Client:
    command, argv = face_command("--socket", path)
    return Client(StdioServerParameters(command=command, args=argv, env=face_env()), **options)


async def _first(events: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for event in events:
        yield event
        return


def _assert_list_changed_declared(client: Client) -> None:
    capabilities = client.session.server_capabilities
    assert capabilities is not None
    assert capabilities.tools is not None
    assert capabilities.tools.list_changed is True


async def _names(client: Client) -> list[str]:
    return sorted(tool.name for tool in (await client.list_tools()).tools)


async def test_a_handshake_era_client_is_told_when_a_restarted_daemon_has_other_ops(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    path = os.path.join(sock_dir, "csp.sock")
    told = trio.Event()

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, ToolListChangedNotification):
            told.set()

    stop = await _serve(nursery, config, path, ECHO_ONLY)
    with trio.fail_after(WAIT_S):
        async with _face(path, mode="legacy", message_handler=on_message) as client:
            _assert_list_changed_declared(client)
            before = await _names(client)
            await stop()
            await _serve(nursery, config, path, TEST_OPS)
            await told.wait()
            after = await _names(client)
    assert before == ["test_echo"]
    assert after == ["test_boom", "test_echo", "test_sleep"]


async def test_a_2026_era_client_listening_gets_the_tools_changed_event(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    path = os.path.join(sock_dir, "csp.sock")
    stop = await _serve(nursery, config, path, TEST_OPS)
    with trio.fail_after(WAIT_S):
        async with _face(path) as client:
            assert client.protocol_version == "2026-07-28"
            _assert_list_changed_declared(client)
            before = await _names(client)
            async with client.listen(tools_list_changed=True) as events:
                await stop()
                await _serve(nursery, config, path, ECHO_ONLY)
                got = [type(event).__name__ async for event in _first(events)]
            after = await _names(client)
    assert got == ["ToolsListChanged"]
    assert before == ["test_boom", "test_echo", "test_sleep"]
    assert after == ["test_echo"]


async def test_a_daemon_back_with_the_same_ops_tells_the_client_nothing(
    nursery: trio.Nursery, config: Config, sock_dir: str
) -> None:
    """Read again at the reconnect, equal: no notification (the face's log says it read)."""
    path = os.path.join(sock_dir, "csp.sock")
    told: list[object] = []
    first = trio.Event()

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, ToolListChangedNotification):
            told.append(message)
            first.set()

    stop = await _serve(nursery, config, path, ECHO_ONLY)
    with trio.fail_after(WAIT_S):
        async with _face(path, mode="legacy", message_handler=on_message) as client:
            await _names(client)
            await stop()
            stop = await _serve(nursery, config, path, ECHO_ONLY)
            # A call answered by the new daemon: the link has reconnected by then.
            result = await client.call_tool("test_echo", {"text": "hi"})
            # Then a change: only this one is told.
            await stop()
            await _serve(nursery, config, path, TEST_OPS)
            await first.wait()
            names = await _names(client)
    assert not result.is_error
    assert len(told) == 1
    assert names == ["test_boom", "test_echo", "test_sleep"]


# --- the interval bound, with a scripted op table -----------------------------------------


def _table(*reqs: str) -> Reply:
    lines = [("OP", json.dumps({"req": req, "in": "TEST", "out": "X"})) for req in reqs]
    return Reply(Status.OK, (("SCOPE", "[sys]"), ("DATA", f"ops:{len(reqs)}"), *lines))


async def test_with_no_reconnect_the_table_is_read_again_after_the_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tables = [_table("a"), _table("a"), _table("a", "b")]
    reads: list[float] = []
    told: list[float] = []

    async def load() -> list[Any]:
        reads.append(trio.current_time())
        entries = parse_op_table(tables[min(len(reads), len(tables)) - 1])
        return build_tools(entries, exec_configured=False, max_timeout_ms=1000)

    async def changed() -> None:
        told.append(trio.current_time())

    toolset = ToolSet(await load())
    start = trio.current_time()
    with trio.move_on_after(35.0):
        await keep_tools_fresh(toolset, load, changed, reread_s=10.0)
    assert [round(t - start) for t in reads[1:]] == [10, 20, 30]
    assert [round(t - start) for t in told] == [20]
    assert [tool.name for tool in toolset.tools] == ["test_a", "test_b"]


async def test_a_table_that_cannot_be_read_keeps_the_tools_served() -> None:
    toolset = ToolSet(
        build_tools(parse_op_table(_table("a")), exec_configured=False, max_timeout_ms=1)
    )
    before = toolset.tools

    async def load() -> list[Any]:
        return build_tools(
            parse_op_table(Reply(Status.FAIL, (("ERROR", "busy:sys"),))),
            exec_configured=False,
            max_timeout_ms=1,
        )

    async def changed() -> None:
        raise AssertionError("nothing changed")

    assert await refresh(toolset, load, changed) is False
    assert (toolset.tools, toolset.version) == (before, 0)


async def test_a_table_with_an_op_this_face_cannot_read_keeps_the_tools_served() -> None:
    """A daemon back as another version describing an op with a field type this face has no
    schema for: the tools served stay, nobody is told, the face goes on. Before, the
    KeyError left ``refresh`` and ended the face."""
    toolset = ToolSet(
        build_tools(parse_op_table(_table("a")), exec_configured=False, max_timeout_ms=1)
    )
    before = toolset.tools
    entry = {"req": "b", "in": "TEST", "out": "X", "fields": [{"name": "N", "type": "float"}]}
    newer = Reply(Status.OK, (("SCOPE", "[sys]"), ("DATA", "ops:1"), ("OP", json.dumps(entry))))

    async def load() -> list[Any]:
        return build_tools(parse_op_table(newer), exec_configured=False, max_timeout_ms=1)

    async def changed() -> None:
        raise AssertionError("nothing changed")

    assert await refresh(toolset, load, changed) is False
    assert (toolset.tools, toolset.version) == (before, 0)
