"""The composition root proper: the catalogue's specialists and the configured memory path,
composed by the core's one builder (``csp_web.core.compose.open_daemon``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from csp_web.app.catalog import SPECIALISTS
from csp_web.config import Config
from csp_web.core.compose import Daemon, open_daemon
from csp_web.core.specialist import Composable
from csp_web.memory.embedded import open_memory_path


@asynccontextmanager
async def open_app_daemon(
    config: Config, specialists: Sequence[Composable] = SPECIALISTS
) -> AsyncIterator[Daemon]:
    """The daemon ``serve`` and ``replay`` run: the specialists open first, then the
    configured memory path (``memory.socket_path``, else the embedded sink); all closed on
    exit, in reverse order."""
    async with open_daemon(config, specialists, memory=open_memory_path(config)) as daemon:
        yield daemon
