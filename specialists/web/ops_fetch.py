"""The page ops under IN:WEB: ``fetch`` (readable content), ``meta`` (the page's card) and
``resolve`` (where a link ends up). Each loads pages only through ``pages.load_page``.

    TASK REQ:fetch https://example.com/article IN:WEB OUT:CONTENT
    MAX_CHARS 5000

    STATUS PARTIAL
    SCOPE [example.com]
    DATA "# Article Title\\n\\nThe first paragraph..."
    TITLE "Article Title"
    WORD_COUNT 1234
    PAGE_TYPE article
    CACHED false
    URL https://example.com/article
    NEXT_START 5000
    REMAINING_CHARS 2311
    CITE https://example.com/article "Article Title"
"""

from __future__ import annotations

import urllib.parse

from csp_web.context import OpContext
from csp_web.errors import FieldError, OpError
from csp_web.fields import FieldSpec, Params
from csp_web.registry import Op
from csp_web.replies import Result, cite
from protocol import ErrorCode, Field, Status

from .pages import Page, load_for_op
from .services import record_web_op, web_services

ARROW = "→"  # seed 000's REDIRECT_CHAIN separator
# (Page.meta key, reply field) in the order meta's reply lists them.
META_FIELDS = (
    ("title", "TITLE"),
    ("description", "DESCRIPTION"),
    ("image", "IMAGE"),
    ("site_name", "SITE_NAME"),
    ("type", "TYPE"),
    ("og_url", "OG_URL"),
)
URL_FIELD = FieldSpec("URL", required=True, doc="an https URL (inline text fills it)")


async def fetch(params: Params, ctx: OpContext) -> Result:
    """A page's content as text (Markdown), json (compact) or html (a tag-free outline),
    ``MAX_CHARS`` of it from ``START``; PARTIAL with NEXT_START and REMAINING_CHARS when more
    is left (SPEC R-3). Later pages read the same cached snapshot."""
    services = web_services(ctx)
    limits = services.config.fetch
    max_chars = params.opt_integer("MAX_CHARS") or limits.default_max_chars
    if max_chars > limits.max_chars_cap:
        raise FieldError(ErrorCode.INVALID_FIELD, f"MAX_CHARS above {limits.max_chars_cap}")
    url, start = params.text("URL"), params.integer("START")
    async with record_web_op(ctx, "fetch", url) as details:
        page = await load_for_op(services, url, no_cache=params.flag("NO_CACHE"))
        details["cache_hit"] = page.cached
        content = page_content(page, params.text("EXTRACT"), url)
        if start > len(content):
            raise FieldError(ErrorCode.INVALID_FIELD, f"START beyond the end ({len(content)})")
        return _fetch_result(page, content, start, max_chars)


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


def _fetch_result(page: Page, content: str, start: int, max_chars: int) -> Result:
    end = min(len(content), start + max_chars)
    fields: list[Field] = [("TITLE", page.title)] if page.title else []
    fields.append(("WORD_COUNT", str(page.word_count)))
    if page.page_type:  # only when the extractor can tell (extract.PAGE_TYPES)
        fields.append(("PAGE_TYPE", page.page_type))
    fields += [
        ("CACHED", "true" if page.cached else "false"),
        ("URL", page.url),
    ]
    status = Status.OK
    if end < len(content):
        status = Status.PARTIAL
        fields += [("NEXT_START", str(end)), ("REMAINING_CHARS", str(len(content) - end))]
    fields.append(cite(page.url, page.title))
    return Result(content[start:end], (page.host,), tuple(fields), status)


async def meta(params: Params, ctx: OpContext) -> Result:
    """The page's card from its head: OpenGraph, else Twitter cards, else JSON-LD, else
    <title> and the meta description (seed 003's getPageMeta). Only fields found are sent."""
    services = web_services(ctx)
    url = params.text("URL")
    async with record_web_op(ctx, "meta", url) as details:
        page = await load_for_op(services, url)
        details["cache_hit"] = page.cached
        if page.kind != "html":
            raise OpError(
                ErrorCode.UNSUPPORTED_CONTENT,
                page.content_type or "unknown",
                fields=(("URL", url),),
            )
        fields = [(name, page.meta[key]) for key, name in META_FIELDS if key in page.meta]
        fields.append(cite(page.url, page.meta.get("title")))
        return Result(f"url:{page.url}", (page.host,), tuple(fields))


async def resolve(params: Params, ctx: OpContext) -> Result:
    """The URL a link ends at, following HTTP redirects and meta refreshes, every hop through
    the guard and robots.txt; at most ``guard.max_redirects`` hops in all."""
    services = web_services(ctx)
    url = params.text("URL")
    limit = services.config.guard.max_redirects
    async with record_web_op(ctx, "resolve", url) as details:
        page = await load_for_op(services, url)
        chain, cached = list(page.redirect_chain), page.cached
        while page.refresh is not None and _differs(page.refresh, page.url):
            if len(chain) > limit:  # the refresh would be hop number len(chain)
                raise _too_many(limit, url)
            page = await load_for_op(services, page.refresh)
            chain += page.redirect_chain
            cached = cached and page.cached
            if len(chain) - 1 > limit:
                raise _too_many(limit, url)
        details["cache_hit"] = cached
        hosts = dict.fromkeys(urllib.parse.urlsplit(hop).hostname or "" for hop in chain)
        return Result(f"url:{page.url}", tuple(hosts), (("REDIRECT_CHAIN", ARROW.join(chain)),))


def _differs(target: str, current: str) -> bool:
    """Whether a refresh goes elsewhere: one to the page itself is a reload, not a hop."""
    return urllib.parse.urldefrag(target).url != urllib.parse.urldefrag(current).url


def _too_many(limit: int, url: str) -> OpError:
    return OpError(ErrorCode.TOO_MANY_REDIRECTS, f"max_{limit}", fields=(("URL", url),))


OPS: list[Op] = [
    Op(
        "fetch",
        "WEB",
        "CONTENT",
        "web",
        fetch,
        (
            URL_FIELD,
            FieldSpec("EXTRACT", "choice", default="text", choices=("text", "json", "html")),
            FieldSpec(
                "MAX_CHARS",
                "int",
                minimum=1,
                doc="default fetch.default_max_chars (8000), at most fetch.max_chars_cap",
            ),
            FieldSpec("START", "int", default=0, minimum=0, doc="character offset to read from"),
            FieldSpec("NO_CACHE", "bool", default=False, doc="download even when cached"),
        ),
        inline="URL",
        doc="a page's readable content, paged by START/MAX_CHARS; PAGE_TYPE when the extractor"
        " can tell (article forum docs listing product collection service)",
    ),
    Op("meta", "WEB", "META", "web", meta, (URL_FIELD,), inline="URL", doc="a page's card"),
    Op(
        "resolve",
        "WEB",
        "URL",
        "web",
        resolve,
        (URL_FIELD,),
        inline="URL",
        doc="the final URL after redirects and meta refreshes",
    ),
]
