"""The one list of specialists the daemon serves, in the order they open (and start their
background tasks). Adding a specialist means adding it here, and nowhere else outside its
folder (docs/adding-an-op.md)."""

from __future__ import annotations

from csp_web.core.specialist import Composable
from csp_web.infra.redis_link import RedisLink
from specialists.browser import BROWSER
from specialists.node import NODE, make_node
from specialists.tool import TOOL, make_tool
from specialists.web import WEB, make_web

SPECIALISTS: tuple[Composable, ...] = (WEB, TOOL, BROWSER, NODE)


def linked(link: RedisLink | None) -> tuple[Composable, ...]:
    """``SPECIALISTS`` sharing the fleet's state through ``link`` (redis.url), or as they
    are without one."""
    if link is None:
        return SPECIALISTS
    return (make_web(link=link), make_tool(link=link), BROWSER, make_node(link=link))
