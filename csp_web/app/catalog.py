"""The one list of specialists the daemon serves, in the order they open (and start their
background tasks), and the config sections they own. Adding a specialist means adding it here,
and nowhere else outside its folder (docs/adding-an-op.md; tests/test_toy_specialist.py)."""

from __future__ import annotations

import ssl
from collections.abc import Sequence

from csp_web.config import SectionSpec
from csp_web.core.specialist import Composable
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


def config_sections(specialists: Sequence[Composable] = SPECIALISTS) -> tuple[SectionSpec, ...]:
    """The config sections ``specialists`` keep in their own folders, for the loader
    (``csp_web.config.load.load_config(path, sections=...)``)."""
    return tuple(s.own_section for s in specialists if s.own_section is not None)
