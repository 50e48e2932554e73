"""The one list of specialists the daemon serves, in the order they open (and start their
background tasks). Adding a specialist means adding it here, and nowhere else outside its
folder (docs/adding-an-op.md)."""

from __future__ import annotations

import ssl

from csp_web.core.api.specialist import Composable
from csp_web.infra.redis_link import RedisLink
from csp_web.net import Resolver, TransportWrapper
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


def with_web_transport(
    wrap: TransportWrapper,
    *,
    resolver: Resolver | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> tuple[Composable, ...]:
    """``SPECIALISTS`` with the web specialist's guarded client wrapped at its transport,
    resolving with ``resolver`` and trusting ``ssl_context`` when given: ``csp-web replay``
    records and serves cassettes there (csp_web.cli.cassette_run)."""
    web = make_web(resolver=resolver, ssl_context=ssl_context, wrap_transport=wrap)
    return (web, TOOL, BROWSER, NODE)
