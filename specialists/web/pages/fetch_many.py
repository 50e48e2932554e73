"""What fetch adds for documents (seed 004's fetchUrl): several URLs at once, fileKeys on
every snapshot and the announcement board.

    TASK REQ:fetch IN:WEB OUT:CONTENT
    URL https://a.example/one
    URL https://b.example/two
    MAX_CHARS 2000

    STATUS PARTIAL
    SCOPE [a.example]
    DATA fetched:1,failed:1
    FETCH fk_k2n3... https://a.example/one chars:5120 tokens:500 truncated:true cached:false "One"
    CONTENT fk_k2n3...:"# One\\n\\nThe first paragraph..."
    FETCH_ERROR https://b.example/two fetch_failed:http_404
    CITE https://a.example/one "One"

The URLs load concurrently, each through ``loaders.fetch_page`` (``loading.load_page``: the
guard, robots.txt, the cache, single-flight, the fetch bucket; Firecrawl behind it when
configured) within the task's deadline; each gets its own outcome.
A page that loads but yields no text is a failure here (``FETCH_ERROR <url>
empty_content:<why>``). PARTIAL when any failed (with ``ERROR`` naming the first failure, SPEC
R-2), was cut at MAX_CHARS, or is a PDF read but for pages that would not load (``ERROR
corrupt_document:pdf:pages_unreadable:<pages>`` when nothing failed); FAIL (the first
failure's code, with every FETCH_ERROR line) when none loaded. Each FETCH line carries what
its page declares and, from the cache, when it was downloaded (``fetch_fields.py``). Paging a
cut page goes by its FILE_KEY and START.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import trio

from csp_web.core.api.audit import redact_url
from csp_web.core.api.context import OpContext
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import Params
from csp_web.core.api.replies import Result, cite
from protocol import ErrorCode, Field, Status

from ..docs.board import Entry, file_lines
from ..services import web_audit
from .fetch_fields import (
    Described,
    cached_at,
    declared_attributes,
    describe,
    empty_error,
    fetch_result,
    unreadable_error,
)
from .filekeys import content_of, file_key, hold, token_estimate
from .loaders import fetch_page, page_view
from .loading import Page
from .services import PagesServices


@dataclass
class _Outcome:
    url: str
    page: Page | None = None
    error: OpError | None = None
    partial: tuple[ErrorCode, str] | None = None  # loaded, but not whole (pages unreadable)


async def announce(ctx: OpContext, services: PagesServices, page: Page) -> str:
    """Hold ``page`` under its fileKey and put it on the peer's board; returns the key."""
    key = file_key(page)
    await hold(services, key, page)
    post(ctx, services, page, key)
    return key


def post(ctx: OpContext, services: PagesServices, page: Page, key: str) -> None:
    """Put ``page``, held under ``key``, on the peer's board at its current turn."""
    content = content_of(page)
    turn = services.board.current(ctx.peer)
    entry = Entry(key, page.url, page.title, len(content), token_estimate(content), turn)
    services.board.announce(ctx.peer, entry, services.config.docs.board)


def answer_page(
    params: Params,
    ctx: OpContext,
    services: PagesServices,
    loaded: tuple[Page, str, str],
    part: tuple[int, int],
    summary: list[Field],
    *,
    described: Described | None = None,
) -> Result:
    """fetch's answer for one page once ``loaded`` (the page, the view it sends and its
    fileKey, held): posted on the peer's board, the ``part`` (START, MAX_CHARS) of the view
    with ``summary``, and the board's FILE lines when BOARD asks. Both of fetch's routes
    answer through it (ops_fetch.fetch, fetch_now.answer_hit), so they cannot drift; the hot
    route passes the view's description it keeps (``describe``'s, made once per entry)."""
    page, content, key = loaded
    post(ctx, services, page, key)
    if described is None:
        described = describe(page, content, key)
    result = fetch_result(content, part, described, summary)
    if params.flag("BOARD"):
        result = dataclasses.replace(result, fields=(*result.fields, *board_lines(ctx, services)))
    return result


def board_lines(ctx: OpContext, services: PagesServices) -> list[Field]:
    """The peer's board as FILE lines."""
    return file_lines(services.board.listing(ctx.peer, services.config.docs.board))


async def fetch_many(
    params: Params,
    ctx: OpContext,
    services: PagesServices,
    urls: list[str],
    max_chars: int,
    max_age_s: int | None,
    max_pages: int | None,
) -> Result:
    """Load ``urls`` concurrently and answer with one FETCH (and CONTENT) line per page
    loaded and one FETCH_ERROR per failure, in the order asked; a document holds its first
    ``max_pages`` pages (None: fetch.max_pages)."""
    outcomes = [_Outcome(url) for url in urls]
    with web_audit(" ".join(map(redact_url, urls))) as notes:
        async with trio.open_nursery() as nursery:
            for outcome in outcomes:
                nursery.start_soon(_load, params, services, outcome, (max_age_s, max_pages))
        loaded = [o for o in outcomes if o.page is not None]
        notes.cache_hit = bool(loaded) and all(o.page.cached for o in loaded if o.page)
        failed = [o for o in outcomes if o.error is not None]
        errors: list[Field] = [
            ("FETCH_ERROR", f"{redact_url(o.url)} {o.error.code}:{o.error.detail}")
            for o in failed
            if o.error
        ]
        if not loaded:
            first = failed[0].error
            assert first is not None
            raise OpError(first.code, first.detail, fields=errors)
        result = await _render(ctx, services, params, loaded, errors, max_chars)
        cause = next(((o.error.code, o.error.detail) for o in failed if o.error), None)
        cause = cause or next((o.partial for o in loaded if o.partial is not None), None)
        if cause is None:
            return notes.attach(result)
        partial = dataclasses.replace(result, status=Status.PARTIAL, error=cause)
        return notes.attach(partial)


async def _load(
    params: Params,
    services: PagesServices,
    outcome: _Outcome,
    bounds: tuple[int | None, int | None],
) -> None:
    """Load ``outcome.url`` within ``bounds`` (MAX_AGE, MAX_PAGES) into ``outcome``."""
    no_cache = params.flag("NO_CACHE")
    max_age_s, max_pages = bounds
    try:
        render = params.opt_text("RENDER")
        page = await fetch_page(
            services,
            outcome.url,
            no_cache=no_cache,
            max_age_s=max_age_s,
            render=render,
            max_pages=max_pages,
        )
        content = page_view(page, params.text("EXTRACT"), outcome.url)  # refuse no view
        empty = empty_error(page, content)
        if empty is not None:  # loaded, but nothing to read: a failure of this URL
            raise OpError(*empty)
        outcome.page = page
        outcome.partial = unreadable_error(page, content)
    except OpError as exc:
        outcome.error = exc


async def _render(
    ctx: OpContext,
    services: PagesServices,
    params: Params,
    loaded: list[_Outcome],
    errors: list[Field],
    max_chars: int,
) -> Result:
    fields: list[Field] = []
    cites: list[Field] = []
    truncated = False
    for outcome in loaded:
        page = outcome.page
        assert page is not None
        content = page_view(page, params.text("EXTRACT"), outcome.url)
        key = await announce(ctx, services, page)
        cut = len(content) > max_chars
        truncated = truncated or cut
        shown = content[:max_chars]
        title = json.dumps(page.title or "", ensure_ascii=False)
        when = cached_at(page)
        stamp = f" cached_at:{when}" if when is not None else ""
        stamp += " rendered:browser" if page.rendered else ""
        stamp += f" pages:{page.pages}" if page.pages is not None else ""
        fields.append(
            (
                "FETCH",
                f"{key} {page.url} chars:{len(content)} tokens:{token_estimate(shown)} "
                f"truncated:{str(cut).lower()} cached:{str(page.cached).lower()}{stamp}"
                f"{declared_attributes(page)} {title}",
            )
        )
        fields.append(("CONTENT", f"{key}:{json.dumps(shown, ensure_ascii=False)}"))
        cites.append(cite(page.url, page.title))
    fields += [*errors, *cites]
    if params.flag("BOARD"):
        fields += board_lines(ctx, services)
    scope = tuple(dict.fromkeys(o.page.host for o in loaded if o.page is not None))
    status = Status.PARTIAL if errors or truncated else Status.OK
    data = f"fetched:{len(loaded)},failed:{len(errors)}"
    return Result(data, scope, tuple(fields), status)
