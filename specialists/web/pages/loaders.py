"""Where a page comes from: the table of loaders, the plan that orders them, and the fetch
path's one entry.

    page = await fetch_page(services, url)       # fetch's load of one URL (one or many asked)
    text = page_view(page, "text", url)          # the view EXTRACT asks of that page

``LOADERS`` names each way to read a URL: ``direct`` (``loading.load_page``: the guard,
robots.txt, the cache, single-flight, the fetch bucket) and ``firecrawl`` (firecrawl.py, on
while its ``base_url`` and key are set). ``plan`` orders them for the settings in effect:
``docs.firecrawl.mode`` ``fallback`` (the default) asks Firecrawl only after a direct load
failed with ``fetch_failed`` or ``too_large`` and reports the direct failure when Firecrawl
fails too (unless Firecrawl's landing was refused by the guard: that code is reported);
``always`` asks Firecrawl first and loads directly when it fails. What the loaders bring is
then rendered in the browser's Chromium when it is an app shell or RENDER asks for it
(``rendering.py``, through the ``Renderer`` port): the served HTML is loaded first all the
same, so the gate, robots.txt and the fetch bucket judge a rendered page as any other.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from csp_web.core.api import budget
from csp_web.core.api.errors import OpError
from protocol import ErrorCode

from .firecrawl import scrape
from .loading import Page, load_page, op_deadline
from .rendering import mode_of, render_if_needed
from .services import PagesServices

log = logging.getLogger(__name__)

# (services, url, key, no_cache, deadline, max_age_s, max_pages) -> the page; ``key`` is the
# loader's credential; a cached snapshot serves only when younger than ``max_age_s`` (None:
# any); a document holds its first ``max_pages`` pages (None: fetch.max_pages).
Loader = Callable[[PagesServices, str, str, bool, float, float | None, int | None], Awaitable[Page]]
# A direct failure worth a second opinion; the gate, robots.txt, DNS and SSRF refusals are not.
FALLBACK_CODES = frozenset({ErrorCode.FETCH_FAILED, ErrorCode.TOO_LARGE})
# A scrape refused for where it landed: reported over the direct failure, which says less.
_GATE_CODES = frozenset({ErrorCode.URL_REJECTED, ErrorCode.SSRF_BLOCKED})


def _direct(
    services: PagesServices,
    url: str,
    key: str,
    no_cache: bool,
    deadline: float,
    max_age_s: float | None,
    max_pages: int | None,
) -> Awaitable[Page]:
    return load_page(
        services,
        url,
        no_cache=no_cache,
        deadline=deadline,
        max_age_s=max_age_s,
        max_pages=max_pages,
    )


def _firecrawl(
    services: PagesServices,
    url: str,
    key: str,
    no_cache: bool,
    deadline: float,
    max_age_s: float | None,
    max_pages: int | None,
) -> Awaitable[Page]:
    return scrape(services, url, key, no_cache=no_cache, deadline=deadline, max_age_s=max_age_s)


LOADERS: Mapping[str, Loader] = {"direct": _direct, "firecrawl": _firecrawl}


@dataclass(frozen=True)
class Step:
    """One loader of a plan: tried when the step before failed with one of ``after`` (None:
    with any code); ``fresh`` skips the cache; ``reported``: codes of this step's failure that
    are answered instead of the first failure's."""

    loader: str
    after: frozenset[ErrorCode] | None = None
    fresh: bool = False
    reported: frozenset[ErrorCode] | None = None


def plan(services: PagesServices) -> tuple[tuple[Step, ...], str]:
    """The loaders to try, in order, for the settings in effect, and Firecrawl's key."""
    config = services.config.docs.firecrawl
    key = os.environ.get(config.api_key_env) if config.base_url is not None else None
    if not key:
        return (Step("direct"),), ""
    if config.mode == "always":
        return (Step("firecrawl"), Step("direct", reported=None)), key
    return (Step("direct"), Step("firecrawl", FALLBACK_CODES, True, _GATE_CODES)), key


async def load(
    services: PagesServices,
    url: str,
    *,
    no_cache: bool,
    deadline: float,
    max_age_s: float | None = None,
    render: str | None = None,
    max_pages: int | None = None,
) -> Page:
    """The page at ``url`` through the planned loaders (see the module's docstring), rendered
    as ``render`` (RENDER's mode; None: ``web.fetch.render``) says; a cached snapshot only
    when younger than ``max_age_s`` (None: any the cache holds); a document's first
    ``max_pages`` pages (None: ``fetch.max_pages``)."""
    await budget.take("fetches")  # each page asked for, from the cache or not (SPEC D-3)
    mode = mode_of(services, render)
    page = await _load_served(
        services,
        url,
        no_cache=no_cache,
        deadline=deadline,
        max_age_s=max_age_s,
        max_pages=max_pages,
    )
    return await render_if_needed(
        services, page, mode=mode, no_cache=no_cache, deadline=deadline, max_age_s=max_age_s
    )


async def _load_served(
    services: PagesServices,
    url: str,
    *,
    no_cache: bool,
    deadline: float,
    max_age_s: float | None,
    max_pages: int | None,
) -> Page:
    steps, key = plan(services)
    first: OpError | None = None
    for number, step in enumerate(steps):
        if first is not None and step.after is not None and first.code not in step.after:
            break
        try:
            fresh = no_cache or step.fresh
            loader = LOADERS[step.loader]
            return await loader(services, url, key, fresh, deadline, max_age_s, max_pages)
        except OpError as exc:
            if first is None:
                first = exc
                if number + 1 < len(steps):
                    log.info("%s failed for %s (%s:%s)", step.loader, url, exc.code, exc.detail)
                continue
            log.info("%s failed for %s too (%s:%s)", step.loader, url, exc.code, exc.detail)
            if step.reported is None or exc.code in step.reported:
                raise
    assert first is not None
    raise first from None


async def fetch_page(
    services: PagesServices,
    url: str,
    *,
    no_cache: bool = False,
    max_age_s: float | None = None,
    render: str | None = None,
    max_pages: int | None = None,
) -> Page:
    """What fetch loads for one URL (asked alone or with others): ``load`` under the op's
    deadline (a cached snapshot only when younger than ``max_age_s``; rendered as ``render``
    says; a document's first ``max_pages`` pages), a failure carrying a ``URL`` field."""
    deadline = op_deadline(services)
    try:
        return await load(
            services,
            url,
            no_cache=no_cache,
            deadline=deadline,
            max_age_s=max_age_s,
            render=render,
            max_pages=max_pages,
        )
    except OpError as exc:
        raise OpError(exc.code, exc.detail, fields=(*exc.fields, ("URL", url))) from exc


def page_view(page: Page, extract: str, url: str) -> str:
    """The view of ``page`` that EXTRACT asks for; raises OpError(UNSUPPORTED_CONTENT) naming
    the content type when the page has no such view."""
    if extract == "text" and page.kind in ("html", "document"):
        return page.markdown
    if extract == "text" and page.kind in ("json", "text"):
        return page.text
    if extract == "json" and page.json is not None:
        return page.json
    if extract == "html" and page.kind == "html":
        return page.outline
    kind = page.content_type or "unknown"
    detail = kind if page.kind == "other" else f"{kind} as {extract}"
    raise OpError(ErrorCode.UNSUPPORTED_CONTENT, detail, fields=(("URL", url),))
