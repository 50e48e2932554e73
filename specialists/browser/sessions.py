"""Named browser sessions: a page kept between tasks, owned by the peer that made it.

The table lives on the trio side; its pages live on the engine thread. A session is one
BrowserContext (no cookies, storage or cache shared with any other), created by the first
action that names it, used by one action at a time, closed by ``ACTION close``, by an idle
timeout (``reap_idle``, run by ``serve_reaper``), by an action that ran out of time on it,
or at shutdown. Names are per owner: two uids naming ``s`` hold two sessions, and neither can
learn the other's exists. A page lost between actions (its browser died, its renderer
crashed, it closed itself, or the session was closed idle or by an action that ran out of
time) is told once, as ``session_lost``, by the next action naming it; the session is
dropped then and the name is free.
Caps: ``max_sessions`` overall and ``max_sessions_per_peer``, checked before any page opens;
actions without SESSION have their own per-peer cap (``OneShots``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from csp_web.core.api.budget import TaskBudget
from csp_web.core.api.errors import OpError
from csp_web.net import GuardConfig
from protocol import ErrorCode
from specialists.browser.config import BrowserConfig

from .downloads import Downloads
from .engine import BrowserEngine
from .errors import timed_out
from .pages import PageSet, close_pages, open_pages

SESSION_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_REAP_FLOOR_S = 1.0  # the reaper never wakes more often than this
_SCOPE = ("browser",)
# Names of sessions closed idle or by a timed-out action, kept to tell their next action: 64
# times the default overall cap of sessions; past it the oldest is forgotten (and its name
# simply opens afresh).
_UNTOLD_KEPT = 1024
Key = tuple[str, str]  # (owner, name): names are per owner


@dataclass
class Session:
    name: str
    owner: str
    pages: PageSet
    last_used: float
    lock: trio.Lock = field(default_factory=trio.Lock)
    budget: TaskBudget | None = None  # its actions' (SPEC D-3): the last frame's that named one


def owner_of(uid: int | None, connection: str) -> str:
    """Who owns what a peer creates: its uid; the stdin peer (no uid) is its connection."""
    return f"uid:{uid}" if uid is not None else f"conn:{connection}"


class OneShots:
    """Actions without SESSION running now, per owner, each holding a context of its own."""

    def __init__(self) -> None:
        self.running: dict[str, int] = {}

    @contextlib.contextmanager
    def hold(self, owner: str, cap: int) -> Iterator[None]:
        """Count one action of ``owner`` in for the block; busy when ``cap`` already run."""
        held = self.running.get(owner, 0)
        if held >= cap:
            raise OpError(ErrorCode.BUSY, f"{cap} one-shot actions per peer", scope=_SCOPE)
        self.running[owner] = held + 1
        try:
            yield
        finally:
            self.running[owner] -= 1
            if not self.running[owner]:
                del self.running[owner]


class SessionTable:
    """Sessions by (owner, name). ``clock`` is trio's by default; tests inject their own."""

    def __init__(self, engine: BrowserEngine, clock: Callable[[], float] | None = None) -> None:
        self.engine = engine
        self.clock = clock or trio.current_time
        self.sessions: dict[Key, Session] = {}
        self._opening: set[Key] = set()  # while their contexts open
        # Closed idle or by a timed-out action, not yet told (insertion order).
        self._untold: dict[Key, None] = {}
        self.closed_idle = 0
        self.changed = trio.Event()  # set when a session opens: the reaper recomputes its sleep

    def count(self, owner: str | None = None) -> int:
        keys = [*self.sessions, *self._opening]
        return sum(1 for key in keys if owner is None or key[0] == owner)

    def _check_caps(self, owner: str, config: BrowserConfig) -> None:
        if self.count(owner) >= config.max_sessions_per_peer:
            raise OpError(
                ErrorCode.TOO_MANY_SESSIONS,
                f"{config.max_sessions_per_peer} per peer",
                scope=_SCOPE,
            )
        if self.count() >= config.max_sessions:
            raise OpError(
                ErrorCode.TOO_MANY_SESSIONS, f"{config.max_sessions} overall", scope=_SCOPE
            )

    @asynccontextmanager
    async def use(
        self, name: str, owner: str, config: BrowserConfig, guard: GuardConfig
    ) -> AsyncIterator[Session]:
        """``owner``'s session ``name`` (made now if new), locked for one action.

        Raises OpError(session_lost) once when its page went since its last action, or it
        was closed idle or by a timed-out action (the session is dropped: the next action
        under the name makes a new one),
        OpError(too_many_sessions) past a cap, BrowserUnavailable when Chromium cannot
        start. An action that runs out of time or is cancelled closes the session, since its
        page may still spin; one that fails otherwise leaves it as it is."""
        key = (owner, name)
        if key in self._untold and key not in self.sessions:
            del self._untold[key]
            raise OpError(ErrorCode.SESSION_LOST, name, scope=_SCOPE)
        session = self.sessions.get(key) or await self._open(key, config, guard)
        async with session.lock:
            if self.sessions.get(key) is not session or session.pages.lost_reason():
                await self._discard(key, session)
                raise OpError(ErrorCode.SESSION_LOST, name, scope=_SCOPE)
            try:
                yield session
            except BaseException as exc:
                # Its reply names the timeout, not the page's loss: the next action under
                # the name hears session_lost, never an OK on a new, empty page.
                if timed_out(exc) and await self._discard(key, session):
                    self._remember_untold(key)
                raise
            finally:
                session.last_used = self.clock()

    async def open_with_state(
        self,
        name: str,
        owner: str,
        config: BrowserConfig,
        guard: GuardConfig,
        storage_state: dict[str, Any],
    ) -> None:
        """Make ``owner``'s session ``name`` on a context holding ``storage_state`` (a saved
        login); invalid_field when it is open already (a state applies to a new session)."""
        key = (owner, name)
        if key in self.sessions:
            raise OpError(
                ErrorCode.INVALID_FIELD, f"STATE opens a session: {name} is open", scope=_SCOPE
            )
        await self._open(key, config, guard, storage_state)

    async def _open(
        self,
        key: Key,
        config: BrowserConfig,
        guard: GuardConfig,
        storage_state: dict[str, Any] | None = None,
    ) -> Session:
        if key in self._opening:
            raise OpError(ErrorCode.BUSY, f"session {key[1]} is opening", scope=_SCOPE)
        self._check_caps(key[0], config)
        self._opening.add(key)
        try:
            pages = await self.engine.run(
                open_pages,
                self.engine,
                guard,
                max_pages=config.max_pages_per_session,
                width=config.viewport_width,
                height=config.viewport_height,
                downloads=Downloads.under(config),
                storage_state=storage_state,
            )
        finally:
            self._opening.discard(key)
        session = Session(key[1], key[0], pages, self.clock())
        self.sessions[key] = session
        self._untold.pop(key, None)  # a new session under the name: its loss is moot
        self.changed.set()
        return session

    async def close(self, name: str, owner: str) -> bool:
        """Close ``owner``'s session ``name``; False when it has none of that name."""
        key = (owner, name)
        session = self.sessions.get(key)
        return session is not None and await self._discard(key, session)

    async def _discard(self, key: Key, session: Session) -> bool:
        """Drop ``session`` from the table and close its context, once (shielded)."""
        if self.sessions.get(key) is not session:
            return False
        del self.sessions[key]
        with trio.CancelScope(shield=True):
            await self.engine.run(close_pages, self.engine, session.pages)
        return True

    async def reap_idle(self, idle_s: float) -> float:
        """Close sessions idle for ``idle_s`` or more; seconds until the next one would be."""
        now = self.clock()
        next_s = idle_s
        for key, session in list(self.sessions.items()):
            if session.lock.locked():
                continue
            left = session.last_used + idle_s - now
            if left <= 0:
                if await self._discard(key, session):
                    self.closed_idle += 1
                    self._remember_untold(key)
            else:
                next_s = min(next_s, left)
        return next_s

    def _remember_untold(self, key: Key) -> None:
        self._untold[key] = None
        while len(self._untold) > _UNTOLD_KEPT:
            del self._untold[next(iter(self._untold))]

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
        for key, session in list(self.sessions.items()):
            with contextlib.suppress(Exception):
                await self._discard(key, session)
