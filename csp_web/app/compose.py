"""The composition root proper: the catalogue's specialists and the configured memory path,
composed by the core's one builder (``csp_web.core.daemon.compose.open_daemon``), and lent to
the programs that run a daemon in process (``csp-web replay``, the MCP face without
``--socket``) so they name no specialist themselves."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio
import trio.testing

from csp_web.app.catalog import linked, with_web_transport
from csp_web.app.memory_path import open_memory_path
from csp_web.app.tracing import open_tracer
from csp_web.client.trio_client import Client, open_stream_client
from csp_web.config import Config
from csp_web.core.daemon.compose import Daemon, op_table, open_daemon
from csp_web.core.daemon.lifecycle import serve
from csp_web.infra.redis_budget import RedisLedger
from csp_web.infra.redis_link import open_redis_link

if TYPE_CHECKING:  # only a cassette run passes one: the CLI stays unimported at start
    from csp_web.cli.cassette_run import WebTransport


@asynccontextmanager
async def open_app_daemon(config: Config, web: WebTransport | None = None) -> AsyncIterator[Daemon]:
    """The daemon ``serve`` and ``replay`` run: the fleet's shared state when ``redis.url``
    is set, the catalogue's specialists sharing that state (or, given ``web``, with the web
    specialist's transport wrapped as it says: a cassette run), then the configured memory
    path (``memory.socket_path``, else the embedded sink), traced when ``otel.enabled``; all
    closed on exit, in reverse order. Raises ConfigError when tracing's packages are missing
    (``csp_web.app.tracing.check_tracing``)."""
    async with open_redis_link(config.redis) as link:
        if web is None:
            chosen = linked(link)
        else:
            chosen = with_web_transport(
                web.wrap, resolver=web.resolver, ssl_context=web.ssl_context
            )
        ops = [(op.req, op.domain) for op in op_table(chosen)]
        # BUDGET_IDs on the fleet's Redis, so every daemon draws from one; else the state dir's.
        ledger = RedisLedger(link, config.budgets) if link is not None else None
        memory = open_memory_path(config)
        async with (
            open_tracer(config.otel, ops) as tracer,
            open_daemon(config, chosen, memory=memory, tracer=tracer, ledger=ledger) as daemon,
        ):
            yield daemon


@asynccontextmanager
async def open_in_process_daemon(config: Config) -> AsyncIterator[Client]:
    """Run the daemon as ``csp-web serve`` does (same specialists, outbox, memory link and
    signals), serving one in-memory stream in place of stdin (and ``socket.path`` when set,
    for the MCP hosts started after this one), and yield its client: the MCP face's daemon
    without ``--socket``. The caller holds the state directory's lock."""
    client_side, daemon_side = trio.testing.memory_stream_pair()
    async with open_app_daemon(config) as daemon, trio.open_nursery() as nursery:

        async def run_daemon(*, task_status: trio.TaskStatus[object]) -> None:
            await serve(
                daemon,
                stdio=daemon_side,
                socket_path=config.socket.path,
                task_status=task_status,
            )
            nursery.cancel_scope.cancel()  # stopped by a signal: so is the face

        await nursery.start(run_daemon)
        async with open_stream_client(client_side) as client:
            yield client
