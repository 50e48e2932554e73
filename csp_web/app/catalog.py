"""The one list of specialists the daemon serves, in the order they open (and start their
background tasks), and the config sections they own. Adding a specialist means adding it here,
and nowhere else outside its folder (docs/adding-an-op.md; tests/test_toy_specialist.py).

The specialists never import each other: they meet through the ports of ``Seams``
(csp_web.core.api.ports), one set per composed daemon, which ``catalogue`` hands to both ends:
the browser's ``Renderer`` to web, web's ``FileStore`` to the browser."""

from __future__ import annotations

import ssl
from collections.abc import Sequence

from csp_web.config import Config, SectionSpec
from csp_web.config import load as loader
from csp_web.core.api.ports import Seams
from csp_web.core.api.specialist import Composable
from csp_web.infra.redis_link import RedisLink
from csp_web.net import Resolver, TransportWrapper
from specialists.browser import BROWSER, make_browser
from specialists.node import NODE, make_node
from specialists.tool import TOOL, make_tool
from specialists.web import WEB, make_web

# The ops and settings of every specialist (op tables, docs, reload paths); a daemon is
# composed from ``catalogue``, whose specialists are joined by their seams.
SPECIALISTS: tuple[Composable, ...] = (WEB, TOOL, BROWSER, NODE)


def catalogue(
    *, link: RedisLink | None = None, seams: Seams | None = None
) -> tuple[Composable, ...]:
    """``SPECIALISTS`` for one daemon: joined by ``seams`` (new ones by default) and sharing
    the fleet's state through ``link`` (redis.url) when given."""
    seams = Seams() if seams is None else seams
    web = make_web(link=link, seams=seams)
    return (web, make_tool(link=link), make_browser(seams=seams), make_node(link=link))


def linked(link: RedisLink | None) -> tuple[Composable, ...]:
    """A daemon's specialists sharing the fleet's state through ``link`` (redis.url), or as
    they are without one; joined by their seams."""
    return catalogue(link=link)


def with_web_transport(
    wrap: TransportWrapper,
    *,
    resolver: Resolver | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> tuple[Composable, ...]:
    """A daemon's specialists with the web specialist's guarded client wrapped at its
    transport, resolving with ``resolver`` and trusting ``ssl_context`` when given:
    ``csp-web replay`` records and serves cassettes there (csp_web.cli.cassette_run)."""
    seams = Seams()
    web = make_web(resolver=resolver, ssl_context=ssl_context, wrap_transport=wrap, seams=seams)
    return (web, TOOL, make_browser(seams=seams), NODE)


def config_sections(specialists: Sequence[Composable] = SPECIALISTS) -> tuple[SectionSpec, ...]:
    """The config sections ``specialists`` keep in their own folders, for the loader
    (``csp_web.config.load.load_config(path, sections=...)``)."""
    return tuple(s.own_section for s in specialists if s.own_section is not None)


def load_config(
    path: str | None = None,
    *,
    sections: Sequence[SectionSpec] | None = None,
    regular_only: bool = False,
) -> Config:
    """``csp_web.config.load.load_config`` with the catalogue's own sections (unless
    ``sections`` names others): the file as the daemon reads it."""
    chosen = config_sections() if sections is None else sections
    return loader.load_config(path, sections=chosen, regular_only=regular_only)


def config_from_mapping(data: object, *, sections: Sequence[SectionSpec] | None = None) -> Config:
    """``csp_web.config.load.config_from_mapping`` with the catalogue's own sections (unless
    ``sections`` names others)."""
    chosen = config_sections() if sections is None else sections
    return loader.config_from_mapping(data, sections=chosen)
