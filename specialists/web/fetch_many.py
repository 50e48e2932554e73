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

The URLs load concurrently, each through ``firecrawl.load_for_fetch`` (``pages.load_page``: the
guard, robots.txt, the cache, single-flight, the fetch bucket; Firecrawl behind it when
configured) within the task's deadline; each gets its own outcome.
PARTIAL when any failed or was cut at MAX_CHARS; FAIL (the first failure's code, with every
FETCH_ERROR line) when none loaded. Paging a cut page goes by its FILE_KEY and START.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import trio

from csp_web.core.api.context import OpContext
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import Params
from csp_web.core.api.replies import Result, cite
from protocol import ErrorCode, Field, Status

from .board import Entry, file_lines
from .filekeys import content_of, file_key, hold, token_estimate
from .firecrawl import load_for_fetch
from .pages import Page
from .services import WebServices, record_web_op


@dataclass
class _Outcome:
    url: str
    page: Page | None = None
    error: OpError | None = None


def page_content(page: Page, extract: str, url: str) -> str:
    """The view of ``page`` that EXTRACT asks for; raises OpError(UNSUPPORTED_CONTENT) naming
    the content type when the page has no such view."""
    if extract == "text" and page.kind == "html":
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


async def announce(ctx: OpContext, services: WebServices, page: Page) -> str:
    """Hold ``page`` under its fileKey and put it on the peer's board; returns the key."""
    key = file_key(page)
    await hold(services, key, page)
    content = content_of(page)
    turn = services.board.current(ctx.peer)
    entry = Entry(key, page.url, page.title, len(content), token_estimate(content), turn)
    services.board.announce(ctx.peer, entry, services.config.docs.board)
    return key


def board_lines(ctx: OpContext, services: WebServices) -> list[Field]:
    """The peer's board as FILE lines."""
    return file_lines(services.board.listing(ctx.peer, services.config.docs.board))


async def fetch_many(
    params: Params, ctx: OpContext, services: WebServices, urls: list[str], max_chars: int
) -> Result:
    """Load ``urls`` concurrently and answer with one FETCH (and CONTENT) line per page
    loaded and one FETCH_ERROR per failure, in the order asked."""
    outcomes = [_Outcome(url) for url in urls]
    async with record_web_op(ctx, "fetch", " ".join(urls)) as details:
        async with trio.open_nursery() as nursery:
            for outcome in outcomes:
                nursery.start_soon(_load, params, ctx, services, outcome)
        loaded = [o for o in outcomes if o.page is not None]
        details["cache_hit"] = bool(loaded) and all(o.page.cached for o in loaded if o.page)
        failed = [o for o in outcomes if o.error is not None]
        errors: list[Field] = [
            ("FETCH_ERROR", f"{o.url} {o.error.code}:{o.error.detail}") for o in failed if o.error
        ]
        if not loaded:
            first = failed[0].error
            assert first is not None
            raise OpError(first.code, first.detail, fields=errors)
        return await _render(ctx, services, params, loaded, errors, max_chars)


async def _load(params: Params, ctx: OpContext, services: WebServices, outcome: _Outcome) -> None:
    try:
        page = await load_for_fetch(services, outcome.url, no_cache=params.flag("NO_CACHE"))
        page_content(page, params.text("EXTRACT"), outcome.url)  # refuse what has no view
        outcome.page = page
    except OpError as exc:
        outcome.error = exc


async def _render(
    ctx: OpContext,
    services: WebServices,
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
        content = page_content(page, params.text("EXTRACT"), outcome.url)
        key = await announce(ctx, services, page)
        cut = len(content) > max_chars
        truncated = truncated or cut
        shown = content[:max_chars]
        title = json.dumps(page.title or "", ensure_ascii=False)
        fields.append(
            (
                "FETCH",
                f"{key} {page.url} chars:{len(content)} tokens:{token_estimate(shown)} "
                f"truncated:{str(cut).lower()} cached:{str(page.cached).lower()} {title}",
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
