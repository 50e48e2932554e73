"""The composition root proper: the catalogue's specialists and the configured memory path,
composed by the core's one builder (``csp_web.core.daemon.compose.open_daemon``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from csp_web.app.catalog import linked
from csp_web.app.memory_path import open_memory_path
from csp_web.config import Config
from csp_web.core.api.specialist import Composable
from csp_web.core.daemon.compose import Daemon, open_daemon
from csp_web.infra.redis_link import open_redis_link


@asynccontextmanager
async def open_app_daemon(
    config: Config, specialists: Sequence[Composable] | None = None
) -> AsyncIterator[Daemon]:
    """The daemon ``serve`` and ``replay`` run: the fleet's shared state when ``redis.url``
    is set, the specialists (default: the catalogue's, sharing that state), then the
    configured memory path (``memory.socket_path``, else the embedded sink); all closed on
    exit, in reverse order."""
    async with open_redis_link(config.redis) as link:
        chosen = linked(link) if specialists is None else specialists
        async with open_daemon(config, chosen, memory=open_memory_path(config)) as daemon:
            yield daemon
