"""The face's tool list kept equal to the daemon's op table (SDK-free).

The table is read at start; a daemon that restarts behind ``DaemonLink`` may come back with
other ops (another version, other specialists), so the table is read again at each reconnect
and, as a bound, every ``reread_s``. CSP/1 has no message a daemon sends unasked, so it
cannot announce a change itself. When the tools differ, the new list is served from then on
and ``changed`` tells the MCP clients (``notifications/tools/list_changed``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import trio

from csp_web.client.trio_client import ClientClosed
from csp_web.mcp_face.daemon_link import DaemonDown, DaemonLink
from csp_web.mcp_face.tools import ToolSpec, ToolTableError

log = logging.getLogger(__name__)

Load = Callable[[], Awaitable[list[ToolSpec]]]
Notify = Callable[[], Awaitable[None]]
# Reads of the table missed (a reconnect the link reports is never missed): a bound, not a poll.
REREAD_S = 300.0


class ToolSet:
    """The tools served now; ``version`` counts the changes (a listing cached by it)."""

    def __init__(self, tools: Sequence[ToolSpec]) -> None:
        self.version = 0
        self.tools: tuple[ToolSpec, ...] = ()
        self.by_name: dict[str, ToolSpec] = {}
        self._set(tools)

    def replace(self, tools: Sequence[ToolSpec]) -> bool:
        """Serve ``tools`` from now on; False, changing nothing, when they are the same."""
        if tuple(tools) == self.tools:
            return False
        self._set(tools)
        self.version += 1
        return True

    def _set(self, tools: Sequence[ToolSpec]) -> None:
        self.tools = tuple(tools)
        self.by_name = {tool.name: tool for tool in tools}


def reconnects(link: DaemonLink) -> Callable[[], Awaitable[None]]:
    """A function that returns at the link's next connection after the last one it saw
    (the first call: after the first connection, or the one up when this was made)."""
    seen = max(link.connects, 1)  # the first may be counted only once its reader runs

    async def wait() -> None:
        nonlocal seen
        seen = await link.wait_connection(seen)

    return wait


async def keep_tools_fresh(
    toolset: ToolSet,
    load: Load,
    changed: Notify,
    *,
    reread_s: float = REREAD_S,
    wait_reconnect: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Until cancelled: read the tools again after each reconnect (``wait_reconnect``
    returns) and at most ``reread_s`` after the last read; ``refresh`` each time."""
    while True:
        with trio.move_on_after(reread_s):
            if wait_reconnect is None:
                await trio.sleep_forever()
            await wait_reconnect()
        await refresh(toolset, load, changed)


async def refresh(toolset: ToolSet, load: Load, changed: Notify) -> bool:
    """Read the tools; when they differ, serve them and await ``changed``. A read that
    fails keeps the tools served (logged): the next reconnect or interval tries again."""
    try:
        tools = await load()
    except (DaemonDown, ClientClosed, trio.TooSlowError, ToolTableError) as exc:
        log.warning("the daemon's op table was not read again (%s); tools unchanged", exc)
        return False
    if not toolset.replace(tools):
        return False
    log.info("the daemon's op table changed: %d tools now", len(toolset.tools))
    await changed()
    return True
