"""A specialist is a typed value: its ops, slot pool, config section, services and background
tasks. The composition root (core.compose.open_daemon) opens each one's services, binds its
ops to them, and starts its background tasks; nothing is looked up by a string name.

    WEB: Specialist[WebConfig, WebServices] = Specialist(
        name="web", ops=(...), slots=lambda s: s.web, section=web_section, ...)

Every field but ``counters`` is required (``kw_only``, no defaults): a specialist cannot
forget its slot limits, and ``slots`` names a ``SlotsConfig`` field, which mypy checks.
``counters`` (metrics only) defaults to none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeAlias, TypeVar

import trio

from csp_web.config import Config, SectionSpec, SlotLimits, SlotsConfig
from csp_web.core.api.ops import BoundOp, Op, OpSpec, bind
from csp_web.core.api.ports import CounterFamily, StatsLine, StorageChecks, TaskPort

C = TypeVar("C")
S = TypeVar("S")
Commit: TypeAlias = Callable[[], None]
# A reload hook: check the new Config (ValueError names what is wrong), return its commit.
Reloader: TypeAlias = Callable[[Config], Commit]


class Background(Protocol):
    """A task that runs as long as the daemon: started (in specialist order) once the
    services are open, cancelled at exit."""

    async def __call__(self, port: TaskPort, *, task_status: trio.TaskStatus[None]) -> None: ...


@dataclass(frozen=True)
class Opened:
    """What the root keeps of one opened specialist; nothing generic left."""

    ops: tuple[BoundOp, ...]
    background: tuple[Background, ...]
    stats_lines: Mapping[str, StatsLine]
    reload: Reloader | None
    storage: StorageChecks = field(default_factory=dict)
    counters: tuple[CounterFamily, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Specialist(Generic[C, S]):
    """One specialist: ``ops`` run in the pool ``slots`` picks, with the services
    ``open_services(section(config), config)`` opens (closed when the daemon stops)."""

    name: str  # "web", "tool": logs and errors
    ops: tuple[Op[S], ...]
    slots: Callable[[SlotsConfig], SlotLimits]  # lambda s: s.web
    section: Callable[[Config], C]  # web_section: section_of(c, "web", WebConfig)
    # The config section it keeps in its own folder, read from its own top-level key (then
    # ``section`` is ``lambda c: section_of(c, key, cls)``); None: a field of Config.
    own_section: SectionSpec | None
    reloadable: tuple[str, ...]  # dotted config paths a SIGHUP applies ("web.fetch")
    restart_only: tuple[str, ...]  # under those, fixed for the daemon's life
    open_services: Callable[[C, Config], AbstractAsyncContextManager[S]]
    background: Callable[[S], tuple[Background, ...]]
    stats_lines: Callable[[S], Mapping[str, StatsLine]]
    storage: Callable[[S], StorageChecks]  # its stores' full-disk checks (SPEC O-6)
    reload: Callable[[S, C, Config], Commit] | None  # checks (ValueError), returns its commit
    # Its labelled counters for the metrics (cache hits, rate-limit waits); none by default.
    counters: Callable[[S], tuple[CounterFamily, ...]] = lambda services: ()

    @property
    def specs(self) -> tuple[OpSpec, ...]:
        return self.ops

    async def open(self, config: Config, stack: AsyncExitStack) -> Opened:
        """Open the services on ``stack`` and bind the ops to them."""
        services = await stack.enter_async_context(self.open_services(self.section(config), config))
        return Opened(
            tuple(bind(op, services) for op in self.ops),
            self.background(services),
            self.stats_lines(services),
            self._reloader(services),
            self.storage(services),
            self.counters(services),
        )

    def _reloader(self, services: S) -> Reloader | None:
        prepare = self.reload
        if prepare is None:
            return None
        section = self.section
        return lambda new: prepare(services, section(new), new)


class Composable(Protocol):
    """A ``Specialist[C, S]`` for any C and S: what the root holds in a tuple."""

    @property
    def name(self) -> str: ...
    @property
    def reloadable(self) -> tuple[str, ...]: ...
    @property
    def restart_only(self) -> tuple[str, ...]: ...
    @property
    def own_section(self) -> SectionSpec | None: ...
    @property
    def slots(self) -> Callable[[SlotsConfig], SlotLimits]: ...
    @property
    def specs(self) -> tuple[OpSpec, ...]: ...

    async def open(self, config: Config, stack: AsyncExitStack) -> Opened: ...
