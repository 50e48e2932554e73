"""The node specialist's services: one typed dataclass opened by an async context manager
(the composition plan's ``open_services``), and the transports run as its background task.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio

from csp_web.config import Config
from csp_web.infra.redis_link import RedisLink
from specialists.node.config import NodesConfig, media_dir, nodes_dir

from .fleet import NodeFleet
from .hub import NodeHub
from .shared import SharedNodeStore
from .store import NodeStore
from .transports import ensure_certificate, serve_node_tls, serve_node_unix, server_context

log = logging.getLogger(__name__)


@dataclass
class NodeServices:
    """The node registry (store, links, pairings) and the settings the transports use."""

    config: NodesConfig
    hub: NodeHub
    tls_paths: tuple[str, str] | None  # (cert, key) when the TLS listener is enabled
    fleet: NodeFleet | None = None  # redis.url: which daemon holds which link, forwarding

    def stats_line(self) -> str:
        hub = self.hub
        line = (
            f"paired:{len(hub.store.nodes)},connected:{len(hub.links)},"
            f"links:{hub.open_links},pending_pairs:{len(hub.pending.pairs)}"
        )
        return line if self.fleet is None else f"{line},{self.fleet.stats()}"


@asynccontextmanager
async def open_node_services(
    config: NodesConfig, root: Config, *, link: RedisLink | None = None
) -> AsyncIterator[NodeServices]:
    """Open the pairing store under ``<state_dir>/nodes`` (0700; the file 0600), or with
    ``link`` (redis.url) the fleet's, and, when TLS is on, load or make its certificate.
    Raises OSError or ValueError (a bad store)."""
    directory = nodes_dir(root.daemon.state_dir)
    store: NodeStore
    if link is None:
        store = await trio.to_thread.run_sync(
            lambda: NodeStore(directory, max_nodes=config.max_nodes)
        )
    else:
        store = SharedNodeStore(link, max_nodes=config.max_nodes)
        await store.refresh()
    hub = NodeHub(config, store, media_dir(config, root.daemon.state_dir))
    fleet = None
    if isinstance(store, SharedNodeStore) and link is not None:
        fleet = NodeFleet(link, hub, store, max_forwarded=config.max_forwarded_tasks)
        hub.fleet = fleet
    tls_paths = None
    if config.tls.enabled:
        if config.tls.cert_path is not None and config.tls.key_path is not None:
            tls_paths = (config.tls.cert_path, config.tls.key_path)
        else:
            tls_dir = os.path.join(directory, "tls")
            tls_paths = await trio.to_thread.run_sync(ensure_certificate, tls_dir)
    yield NodeServices(config, hub, tls_paths, fleet)


async def serve_nodes(
    services: NodeServices, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve the node transports that are configured until cancelled; started once they
    listen. Links run in this task's nursery, so they end with it."""
    config = services.config
    hub = services.hub
    async with trio.open_nursery() as nursery:
        if services.fleet is not None:
            await nursery.start(services.fleet.serve)
        if config.socket_path is not None:
            await nursery.start(_serve_unix, config.socket_path, config, hub, nursery)
        if services.tls_paths is not None:
            context, fingerprint = server_context(*services.tls_paths)
            hub.fingerprint = fingerprint
            hub.tls_address = await nursery.start(_serve_tls, config, context, hub, nursery)
            log.info("nodes: TLS certificate sha256 %s", fingerprint)
        task_status.started()


def node_background(
    services: NodeServices,
) -> Callable[..., Awaitable[None]]:
    """``serve_nodes`` as the daemon runs its background tasks: ``serve(port, *,
    task_status)`` (the node transports need nothing of the port)."""

    async def serve(port: object, *, task_status: trio.TaskStatus[None]) -> None:
        await serve_nodes(services, task_status=task_status)

    return serve


async def _serve_unix(
    path: str,
    config: NodesConfig,
    hub: NodeHub,
    nursery: trio.Nursery,
    *,
    task_status: trio.TaskStatus[list[trio.SocketListener]],
) -> None:
    await serve_node_unix(
        path, config, hub.serve_link, handler_nursery=nursery, task_status=task_status
    )


async def _serve_tls(
    config: NodesConfig,
    context: Any,
    hub: NodeHub,
    nursery: trio.Nursery,
    *,
    task_status: trio.TaskStatus[str],
) -> None:
    await serve_node_tls(
        config.tls, context, hub.serve_link, handler_nursery=nursery, task_status=task_status
    )
