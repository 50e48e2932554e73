"""Paired nodes: devices that join the daemon and run camera, screen, location, notify and
canvas actions for the ``node`` op (protocol/NODES.md).

- ``wire``: the link's frames (shared with the reference node), ``store``: paired nodes,
  pairing codes, the attempt limiter; ``results``: media and reply checks; ``link``: one
  node connection; ``hub``: the registry; ``transports``: Unix socket and TLS listener;
  ``services``: ``NodeServices`` and ``open_node_services``; ``ops_node``: the ops;
  ``shared``, ``fleet`` and ``forward_wire``: with redis.url, the fleet's store, link
  registry and forwarding;
  ``agent`` and ``backends``: the reference node (``csp-web node run``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

import trio

from csp_web.config import SectionSpec, section_of
from csp_web.core.api.ops import Op
from csp_web.core.api.ports import StatsLine, TaskPort
from csp_web.core.api.specialist import Background, Specialist
from csp_web.infra.redis_link import RedisLink

from . import ops_node
from .config import NodesConfig
from .services import NodeServices, open_node_services, serve_nodes

OPS: tuple[Op[NodeServices], ...] = tuple(ops_node.OPS)


def _background(nodes: NodeServices) -> tuple[Background, ...]:
    async def serve(port: TaskPort, *, task_status: trio.TaskStatus[None]) -> None:
        await serve_nodes(nodes, task_status=task_status)  # the transports: no use of the port

    return (serve,)


def _stats_lines(nodes: NodeServices) -> Mapping[str, StatsLine]:
    return {"NODES": nodes.stats_line}  # read at each REQ:stats


def make_node(*, link: RedisLink | None = None) -> Specialist[NodesConfig, NodeServices]:
    """The node specialist; ``link`` (redis.url) shares the paired nodes and the link
    registry with the fleet and forwards tasks for nodes held elsewhere (``fleet``)."""
    return Specialist(
        name="node",
        ops=OPS,  # they run in the tool pool: pairing and actions are operator acts, audited
        slots=lambda slots: slots.tool,
        section=lambda config: section_of(config, "nodes", NodesConfig),
        own_section=SectionSpec("nodes", NodesConfig),
        reloadable=(),
        restart_only=(),
        open_services=partial(open_node_services, link=link),
        background=_background,
        stats_lines=_stats_lines,
        storage=lambda nodes: {
            "media": lambda: nodes.hub.media.storage_full,
            "state": lambda: nodes.hub.store.storage_full,
        },
        reload=None,
    )


NODE = make_node()
