"""Paired nodes: devices that join the daemon and run camera, screen, location, notify and
canvas actions for the ``node`` op (protocol/NODES.md).

- ``wire``: the link's frames (shared with the reference node), ``store``: paired nodes,
  pairing codes, the attempt limiter; ``results``: media and reply checks; ``link``: one
  node connection; ``hub``: the registry; ``transports``: Unix socket and TLS listener;
  ``services``: ``NodeServices`` and ``open_node_services``; ``ops_node``: the ops;
  ``agent`` and ``backends``: the reference node (``csp-web node run``).
"""

from __future__ import annotations

from csp_web.registry import Op


def node_ops() -> list[Op]:
    """The node specialist's ops."""
    from . import ops_node

    return list(ops_node.OPS)
