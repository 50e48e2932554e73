"""The page ops under IN:WEB: ``fetch`` (readable content), ``meta`` (the page's card) and
``resolve`` (where a link ends up). Each loads pages only through ``loading.load_page`` (fetch
through ``loaders.fetch_page``, Firecrawl behind it when configured).

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

from csp_web.core.api.audit import redact_url
from csp_web.core.api.context import OpContext
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import Example, FieldSpec, Params, ReplyField, check_start
from csp_web.core.api.ops import READS_WEB, Hot, Op
from csp_web.core.api.replies import Result, cite
from protocol import ErrorCode, Field

from ..services import WebServices, web_audit
from .fetch_fields import fetch_limits, summary_fields
from .fetch_many import answer_page, fetch_many
from .fetch_now import answer_hit, likely_hit
from .filekeys import file_key as file_key_of
from .filekeys import hold
from .filepages import held_or_file
from .loaders import fetch_page, page_view
from .loading import load_for_op
from .services import PagesServices

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


async def fetch(params: Params, ctx: OpContext, services: PagesServices) -> Result:
    """A page's content as text (Markdown), json (compact) or html (a tag-free outline),
    ``MAX_CHARS`` of it from ``START``; PARTIAL with NEXT_START and REMAINING_CHARS when more
    is left (SPEC R-3). Later pages read the same snapshot, by URL (the cache) or FILE_KEY.
    Several URL fields load concurrently (``fetch_many.py``)."""
    max_chars, max_pages = fetch_limits(params, services)
    urls, key = params.texts("URL"), params.opt_text("FILE_KEY")
    max_age_s = params.opt_integer("MAX_AGE")
    services.board.turn(ctx.peer, services.config.docs.board)
    if len(urls) > 1:
        return await fetch_many(params, ctx, services, urls, max_chars, max_age_s, max_pages)
    target = key if key is not None else urls[0]
    with web_audit(redact_url(target)) as notes:
        if key is not None:
            page = await held_or_file(services, key)
        else:
            no_cache = params.flag("NO_CACHE")
            render = params.opt_text("RENDER")
            page = await fetch_page(
                services,
                urls[0],
                no_cache=no_cache,
                max_age_s=max_age_s,
                render=render,
                max_pages=max_pages,
            )
        notes.cache_hit = page.cached
        content = page_view(page, params.text("EXTRACT"), target)
        start = params.integer("START")
        check_start(start, len(content))
        file_key = file_key_of(page)
        await hold(services, file_key, page)
        summary: list[Field] = []
        if start + max_chars < len(content):  # PARTIAL: say what the rest holds
            view = f"{file_key}:{params.text('EXTRACT')}"
            summary = await summary_fields(services, view, content)
        loaded = (page, content, file_key)
        return notes.attach(answer_page(params, ctx, services, loaded, (start, max_chars), summary))


async def meta(params: Params, ctx: OpContext, services: PagesServices) -> Result:
    """The page's card from its head: OpenGraph, else Twitter cards, else JSON-LD, else
    <title> and the meta description (seed 003's getPageMeta). Only fields found are sent."""
    url = params.text("URL")
    with web_audit(redact_url(url)) as notes:
        page = await load_for_op(services, url)
        notes.cache_hit = page.cached
        if page.kind != "html":
            raise OpError(
                ErrorCode.UNSUPPORTED_CONTENT,
                page.content_type or "unknown",
                fields=(("URL", url),),
            )
        fields = [(name, page.meta[key]) for key, name in META_FIELDS if key in page.meta]
        fields.append(cite(page.url, page.meta.get("title")))
        return notes.attach(Result(f"url:{page.url}", (page.host,), tuple(fields)))


async def resolve(params: Params, ctx: OpContext, services: PagesServices) -> Result:
    """The URL a link ends at, following HTTP redirects and meta refreshes, every hop through
    the guard and robots.txt; at most ``guard.max_redirects`` hops in all."""
    url = params.text("URL")
    limit = services.config.guard.max_redirects
    with web_audit(redact_url(url)) as notes:
        page = await load_for_op(services, url)
        chain, cached = list(page.redirect_chain), page.cached
        while page.refresh is not None and _differs(page.refresh, page.url):
            if len(chain) > limit:  # the refresh would be hop number len(chain)
                raise _too_many(limit, url)
            page = await load_for_op(services, page.refresh, asked=url)
            chain += page.redirect_chain
            cached = cached and page.cached
            if len(chain) - 1 > limit:
                raise _too_many(limit, url)
        notes.cache_hit = cached
        hosts = dict.fromkeys(urllib.parse.urlsplit(hop).hostname or "" for hop in chain)
        chain_field = ("REDIRECT_CHAIN", ARROW.join(chain))
        return notes.attach(Result(f"url:{page.url}", tuple(hosts), (chain_field,)))


def _differs(target: str, current: str) -> bool:
    """Whether a refresh goes elsewhere: one to the page itself is a reload, not a hop."""
    return urllib.parse.urldefrag(target).url != urllib.parse.urldefrag(current).url


def _too_many(limit: int, url: str) -> OpError:
    return OpError(ErrorCode.TOO_MANY_REDIRECTS, f"max_{limit}", fields=(("URL", url),))


FETCH_REPLIES = (
    ReplyField("TITLE", "one page, with a title", "the page's title"),
    ReplyField("DESCRIPTION", "one page that declares it", "og, JSON-LD or meta description"),
    ReplyField("AUTHOR", "one page that declares it", "meta author, JSON-LD or article:author"),
    ReplyField("PUBLISHED", "one page that declares it", "publication date, ISO-8601 (YYYY-MM-DD)"),
    ReplyField("LANG", "one page that declares it", "its language, a BCP 47 tag (html lang)"),
    ReplyField("SITE_NAME", "one page that declares it", "og:site_name or JSON-LD publisher"),
    ReplyField("WORD_COUNT", "one page", "words in the readable content", kind="int"),
    ReplyField(
        "PAGE_TYPE",
        "one HTML page the extractor can tell (R-7)",
        "article forum docs listing product collection service",
    ),
    ReplyField("PAGES", "one paged document (PDF)", "how many pages it has", kind="int"),
    ReplyField(
        "PAGES_READ", "one paged document cut by MAX_PAGES", "how many were read", kind="int"
    ),
    ReplyField("CACHED", "one page", "whether it came from the cache", kind="bool"),
    ReplyField("CACHED_AT", "one page from the cache", "when it was downloaded, ISO-8601 UTC"),
    ReplyField("RENDERED", "one page read from a browser's DOM", "browser"),
    ReplyField(
        "RENDER_REASON",
        "one page rendered, or an app shell that was not",
        "always, or the app shell's tell (root_div noscript script_heavy); not rendered:"
        " <tell>,render_off, <tell>,render_unavailable or <tell>,render_failed:<why>",
    ),
    ReplyField("URL", "one page; FAIL: the URL that failed", "the page's final URL"),
    ReplyField("FILE_KEY", "one page; FAIL: unknown_file_key", "the content's fileKey"),
    ReplyField("CONTENT_LENGTH", "one page", "the whole content's length in chars", kind="int"),
    ReplyField("TOKENS", "one page", "about how many model tokens DATA is", kind="int"),
    ReplyField("TRUNCATED", "one page", "whether DATA stops before the end", kind="bool"),
    ReplyField("NEXT_START", "PARTIAL, one page", "START for the next part", kind="int"),
    ReplyField("REMAINING_CHARS", "PARTIAL, one page", "chars after this part", kind="int"),
    ReplyField(
        "SUMMARY",
        "PARTIAL past MAX_CHARS, one page: one per point",
        "a sentence of the whole page's extractive summary",
        repeat=True,
    ),
    ReplyField(
        "FETCH",
        "several URLs: one per page loaded",
        "<fileKey> <url> chars tokens truncated cached [cached_at] [rendered] [pages]"
        " [description author"
        ' published lang site_name] "<title>"',
        repeat=True,
    ),
    ReplyField(
        "CONTENT",
        "several URLs: one per page loaded",
        "<fileKey>:<content as a JSON string>",
        repeat=True,
    ),
    ReplyField(
        "FETCH_ERROR", "several URLs: one per URL that failed", "<url> <code>:<detail>", repeat=True
    ),
    ReplyField("FILE", "BOARD true: one per page on the board", "as board's FILE", repeat=True),
    ReplyField("CITE", "per page", "the page (R-4)", repeat=True),
    ReplyField("RETRY_AFTER", "FAIL: rate_limited", "seconds to wait", kind="int"),
)
FETCH_EXAMPLE = Example(
    ("TASK REQ:fetch https://origin.test/tides IN:WEB OUT:CONTENT\nID 1\nMAX_CHARS 120\n"),
    (
        "STATUS PARTIAL\n"
        "ID 1\n"
        "SCOPE [origin.test]\n"
        'DATA "# Tides of the North Sea\\n\\nThe North Sea has two high tides '
        'every day, about twelve hours and twenty-five minutes apart. "\n'
        'TITLE "Tides of the North Sea"\n'
        'DESCRIPTION "Two high tides a day."\n'
        "AUTHOR Jan de Vries\n"
        "PUBLISHED 2026-03-05\n"
        "LANG en\n"
        "SITE_NAME Tide Tables\n"
        "WORD_COUNT 62\n"
        "CACHED false\n"
        "URL https://origin.test/tides\n"
        "FILE_KEY fk_xxxxxxxxxxxxxxxx\n"
        "CONTENT_LENGTH 359\n"
        "TOKENS 30\n"
        "TRUNCATED true\n"
        "NEXT_START 120\n"
        "REMAINING_CHARS 239\n"
        'SUMMARY "The North Sea has two high tides every day, about twelve hours and '
        'twenty-five minutes apart."\n'
        'SUMMARY "Spring tides follow the new and the full moon; neap tides fall between '
        'them."\n'
        'SUMMARY "Tide tables give the times of high and low water for each port, and '
        'harbour masters publish them a year ahead."\n'
        'CITE https://origin.test/tides "Tides of the North Sea"\n'
    ),
)

META_REPLIES = (
    ReplyField("TITLE", "found", "og:title, twitter:title, JSON-LD name or <title>"),
    ReplyField("DESCRIPTION", "found", "the page's description"),
    ReplyField("IMAGE", "found", "its image URL"),
    ReplyField("SITE_NAME", "found", "the site's name"),
    ReplyField("TYPE", "found", "og:type"),
    ReplyField("OG_URL", "found", "the canonical URL it names"),
    ReplyField("CITE", "OK", "the page (R-4)", repeat=True),
    ReplyField("URL", "FAIL", "the URL asked"),
    ReplyField("RETRY_AFTER", "FAIL: rate_limited", "seconds to wait", kind="int"),
)
META_EXAMPLE = Example(
    ("TASK REQ:meta https://origin.test/tides IN:WEB OUT:META\nID 1\n"),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE [origin.test]\n"
        "DATA url:https://origin.test/tides\n"
        'TITLE "Tides of the North Sea"\n'
        'DESCRIPTION "Two high tides a day."\n'
        "SITE_NAME Tide Tables\n"
        'CITE https://origin.test/tides "Tides of the North Sea"\n'
    ),
)

RESOLVE_REPLIES = (
    ReplyField("REDIRECT_CHAIN", "OK", f"every hop, joined by '{ARROW}' (U+2192)"),
    ReplyField("URL", "FAIL", "the URL asked"),
    ReplyField("RETRY_AFTER", "FAIL: rate_limited", "seconds to wait", kind="int"),
)
RESOLVE_EXAMPLE = Example(
    ("TASK REQ:resolve https://origin.test/moved IN:WEB OUT:URL\nID 1\n"),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE [origin.test]\n"
        "DATA url:https://origin.test/tides\n"
        "REDIRECT_CHAIN https://origin.test/moved→https://origin.test/tides\n"
    ),
)


OPS: list[Op[WebServices]] = [
    Op(
        "fetch",
        "WEB",
        "CONTENT",
        "web",
        fetch,
        (
            FieldSpec(
                "URL",
                repeat=True,
                doc="an https URL (inline text fills it); repeat for several, at most "
                "docs.max_urls (5), loaded concurrently",
            ),
            FieldSpec("FILE_KEY", doc="a fileKey from an earlier fetch, instead of URL"),
            FieldSpec("EXTRACT", "choice", default="text", choices=("text", "json", "html")),
            FieldSpec(
                "MAX_CHARS",
                "int",
                minimum=1,
                doc="default fetch.default_max_chars (8000), at most fetch.max_chars_cap",
            ),
            FieldSpec("START", "int", default=0, minimum=0, doc="character offset to read from"),
            FieldSpec(
                "MAX_PAGES",
                "int",
                minimum=1,
                doc="a PDF's pages read: default fetch.max_pages (100), at most"
                " fetch.max_pages_cap (1000)",
            ),
            FieldSpec(
                "NO_CACHE",
                "bool",
                default=False,
                doc="download; the page cache is neither read nor written",
            ),
            FieldSpec(
                "MAX_AGE",
                "int",
                minimum=0,
                doc="seconds: read the cache only when its snapshot is younger (0: download)",
            ),
            FieldSpec(
                "RENDER",
                "choice",
                choices=("auto", "never", "always"),
                doc="run the page's JavaScript in Chromium: auto (an app shell), never, always;"
                " default web.fetch.render (auto)",
            ),
            FieldSpec("BOARD", "bool", default=False, doc="add the announcement board (FILE)"),
        ),
        inline="URL",
        replies=FETCH_REPLIES,
        example=FETCH_EXAMPLE,
        doc="pages' readable content with fileKeys, paged by START/MAX_CHARS; PAGE_TYPE when"
        " the extractor can tell (article forum docs listing product collection service)",
        effects=READS_WEB,
        hot=Hot(likely_hit, answer_hit),
    ),
    Op(
        "meta",
        "WEB",
        "META",
        "web",
        meta,
        (URL_FIELD,),
        inline="URL",
        replies=META_REPLIES,
        example=META_EXAMPLE,
        doc="a page's card",
        effects=READS_WEB,
    ),
    Op(
        "resolve",
        "WEB",
        "URL",
        "web",
        resolve,
        (URL_FIELD,),
        inline="URL",
        replies=RESOLVE_REPLIES,
        example=RESOLVE_EXAMPLE,
        doc="the final URL after redirects and meta refreshes",
        effects=READS_WEB,
    ),
]
