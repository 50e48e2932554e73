"""The specialists: web and tool handlers, registered with the daemon's op table."""

from __future__ import annotations

from csp_web.config import Config
from csp_web.registry import Op


def all_ops(config: Config) -> list[Op]:
    """Every specialist op the daemon serves next to its own IN:SYS ops."""
    return []
