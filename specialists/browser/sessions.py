"""Named browser sessions: a page kept between tasks, owned by the peer that made it.

The table lives on the trio side; its pages live on the engine thread. A session is one
BrowserContext (no cookies, storage or cache shared with any other), created by the first
action that names it, used by one action at a time, closed by ``ACTION close``, by an idle
timeout (``reap_idle``, run by ``serve_reaper``), when its browser died, or at shutdown.
Caps: ``max_sessions`` overall and ``max_sessions_per_peer``, checked before any page opens.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from csp_web.config.browser import BrowserConfig
from csp_web.core.errors import OpError
from csp_web.net import GuardConfig
from protocol import ErrorCode

from .engine import BrowserEngine
from .pages import PageSet, close_pages, open_pages

SESSION_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_REAP_FLOOR_S = 1.0  # the reaper never wakes more often than this


@dataclass
class Session:
    name: str
    owner: str
    pages: PageSet
    last_used: float
    lock: trio.Lock = field(default_factory=trio.Lock)


def owner_of(uid: int | None, connection: str) -> str:
    """Who owns what a peer creates: its uid; the stdin peer (no uid) is its connection."""
    return f"uid:{uid}" if uid is not None else f"conn:{connection}"


class SessionTable:
    """Sessions by name. ``clock`` is trio's by default; tests inject their own."""

    def __init__(self, engine: BrowserEngine, clock: Callable[[], float] | None = None) -> None:
        self.engine = engine
        self.clock = clock or trio.current_time
        self.sessions: dict[str, Session] = {}
        self._opening: dict[str, str] = {}  # name -> owner, while its context opens
        self.closed_idle = 0
        self.changed = trio.Event()  # set when a session opens: the reaper recomputes its sleep

    def count(self, owner: str | None = None) -> int:
        names = [*self.sessions.values()]
        taken = sum(1 for s in names if owner is None or s.owner == owner)
        return taken + sum(1 for o in self._opening.values() if owner is None or o == owner)

    def _check_caps(self, owner: str, config: BrowserConfig) -> None:
        if self.count(owner) >= config.max_sessions_per_peer:
            raise OpError(
                ErrorCode.TOO_MANY_SESSIONS,
                f"{config.max_sessions_per_peer} per peer",
                scope=("browser",),
            )
        if self.count() >= config.max_sessions:
            raise OpError(
                ErrorCode.TOO_MANY_SESSIONS, f"{config.max_sessions} overall", scope=("browser",)
            )

    @asynccontextmanager
    async def use(
        self, name: str, owner: str, config: BrowserConfig, guard: GuardConfig
    ) -> AsyncIterator[Session]:
        """The session ``name`` (made now if new), locked for one action.

        Raises OpError(permission_denied) when another peer owns it, OpError(too_many_sessions)
        past a cap, BrowserUnavailable when Chromium cannot start."""
        session = self.sessions.get(name)
        if session is not None and not session.pages.handle.connected:
            await self.close(name)  # its browser died: the name starts afresh
            session = None
        if session is None:
            session = await self._open(name, owner, config, guard)
        if session.owner != owner:
            raise OpError(
                ErrorCode.PERMISSION_DENIED,
                f"session {name} belongs to another peer",
                scope=("browser",),
            )
        async with session.lock:
            try:
                yield session
            finally:
                session.last_used = self.clock()

    async def _open(
        self, name: str, owner: str, config: BrowserConfig, guard: GuardConfig
    ) -> Session:
        if name in self._opening:
            if self._opening[name] != owner:
                raise OpError(
                    ErrorCode.PERMISSION_DENIED,
                    f"session {name} belongs to another peer",
                    scope=("browser",),
                )
            raise OpError(ErrorCode.BUSY, f"session {name} is opening", scope=("browser",))
        self._check_caps(owner, config)
        self._opening[name] = owner
        try:
            pages = await self.engine.run(
                open_pages,
                self.engine,
                guard,
                max_pages=config.max_pages_per_session,
                width=config.viewport_width,
                height=config.viewport_height,
            )
        finally:
            del self._opening[name]
        session = Session(name, owner, pages, self.clock())
        self.sessions[name] = session
        self.changed.set()
        return session

    async def close(self, name: str, owner: str | None = None) -> bool:
        """Close ``name``; False when there is no such session (of ``owner``, if given)."""
        session = self.sessions.get(name)
        if session is None or (owner is not None and session.owner != owner):
            return False
        del self.sessions[name]
        with trio.CancelScope(shield=True):
            await self.engine.run(close_pages, self.engine, session.pages)
        return True

    async def reap_idle(self, idle_s: float) -> float:
        """Close sessions idle for ``idle_s`` or more; seconds until the next one would be."""
        now = self.clock()
        next_s = idle_s
        for name, session in list(self.sessions.items()):
            if session.lock.locked():
                continue
            left = session.last_used + idle_s - now
            if left <= 0:
                if await self.close(name):
                    self.closed_idle += 1
            else:
                next_s = min(next_s, left)
        return next_s

    async def serve_reaper(
        self,
        idle_s: Callable[[], float],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Reap idle sessions until cancelled (``idle_s`` is read each round: reloadable)."""
        task_status.started()
        while True:
            wait_s = await self.reap_idle(idle_s())
            self.changed = trio.Event()
            with trio.move_on_after(max(wait_s, _REAP_FLOOR_S)):
                await self.changed.wait()

    async def aclose(self) -> None:
        """Close every session (at shutdown)."""
        for name in list(self.sessions):
            with contextlib.suppress(Exception):
                await self.close(name)
