"""What a fetch reply says about a page beyond its content (issue 24, "What fetch returns").

    DESCRIPTION AUTHOR PUBLISHED LANG SITE_NAME   what the page declares (og, JSON-LD, meta):
                                                  one line each for one URL, attributes of
                                                  each FETCH line for several
    CACHED_AT                                     when a snapshot read from the cache was made
    RENDERED RENDER_REASON                        a page read from the DOM Chromium rendered, and
                                                  why; an app shell left as served, and why
    SUMMARY                                       a PARTIAL page's extractive summary, whole
    ERROR empty_content:<why>                     a page that loaded but yields no text
    PAGES PAGES_READ                              a paged document's pages, and how many were
                                                  read when MAX_PAGES (or fetch.max_pages) cut
    ERROR no_text_layer:<why>                     a document with no text to read: encrypted,
                                                  scanned, or max_pages (none in the pages read)
    ERROR corrupt_document:pdf:pages_unreadable:<n,m-k>
                                                  a PDF read but for the pages named (PARTIAL);
                                                  xlsx:sheets_unreadable:<n> for sheets

The declared values come from ``headmeta.read_head`` (the one parse of the head, kept in the
snapshot's ``meta``), so fetch and meta read them one way.
"""

from __future__ import annotations

import datetime
import functools
import json
from dataclasses import dataclass

from csp_web.core.api.errors import FieldError
from csp_web.core.api.fields import Params
from csp_web.core.api.replies import Result, cite
from protocol import ErrorCode, Field, Status
from specialists.formats import unreadable_pages, unreadable_sheets

from .documents import reader_for
from .emptiness import NO_TEXT, SCRIPT_ONLY, is_empty, is_placeholder
from .filekeys import content_of, file_key, hold, window
from .loading import Page, op_deadline
from .services import PagesServices
from .summarize import summarize_extractive

# (Page.meta key, reply field); in a FETCH line free text is quoted, a date or a tag is not.
DECLARED = (
    ("description", "DESCRIPTION"),
    ("author", "AUTHOR"),
    ("published", "PUBLISHED"),
    ("lang", "LANG"),
    ("site_name", "SITE_NAME"),
)
_BARE = frozenset({"published", "lang"})
# A PARTIAL's summary: the three points a caller needs to judge the pages it has not read.
SUMMARY_BULLETS = 3
MAX_RANGES = 10  # page ranges an ERROR names before it counts the rest
SUMMARY_NAMESPACE = "fetch_summary"  # cache entries: "<fileKey>:<EXTRACT>" -> the bullets


def declared_fields(page: Page) -> list[Field]:
    """One reply line per value the page declares, in DECLARED's order (the frame writer
    quotes a value that needs it, as for meta's)."""
    return [(name, page.meta[key]) for key, name in DECLARED if key in page.meta]


def declared_attributes(page: Page) -> str:
    """The declared values as ``name:value`` attributes of a FETCH line (a leading space
    each), free text as JSON strings so a value cannot run into the next attribute."""
    return "".join(
        f" {key}:{_spelled(key, page.meta[key])}" for key, _ in DECLARED if key in page.meta
    )


def _spelled(key: str, value: str) -> str:
    return value if key in _BARE else json.dumps(value, ensure_ascii=False)


def cached_at(page: Page) -> str | None:
    """When a snapshot read from the cache was downloaded, ISO-8601 in UTC to the second;
    None for a page downloaded by this load."""
    if not page.cached:
        return None
    moment = datetime.datetime.fromtimestamp(page.fetched_at, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def render_fields(page: Page) -> list[Field]:
    """``RENDERED browser`` for a page read from a rendered DOM, and ``RENDER_REASON`` when a
    render was done or wanted (rendering.py)."""
    fields: list[Field] = [("RENDERED", "browser")] if page.rendered else []
    if page.render_reason is not None:
        fields.append(("RENDER_REASON", page.render_reason))
    return fields


def empty_error(page: Page, content: str) -> tuple[ErrorCode, str] | None:
    """``(EMPTY_CONTENT, why)`` when ``content``, the view a reply would send, holds no text,
    or is an unrendered app shell's title and placeholder (``emptiness.is_placeholder``);
    ``(NO_TEXT_LAYER, why)`` for a document without a text layer (its reader says why)."""
    if not is_empty(content):
        shell = page.empty or ""
        if shell.startswith(f"{SCRIPT_ONLY},") and is_placeholder(content):
            return ErrorCode.EMPTY_CONTENT, shell
        return None
    if page.no_text is not None:
        return ErrorCode.NO_TEXT_LAYER, page.no_text
    return ErrorCode.EMPTY_CONTENT, page.empty or NO_TEXT


def unreadable_error(page: Page, content: str) -> tuple[ErrorCode, str] | None:
    """``(CORRUPT_DOCUMENT, "pdf:pages_unreadable:<pages>")`` when ``content``, a PDF's view,
    stands in for pages its reader could not load (``UNREADABLE_PAGE``), and the same for an
    XLSX's damaged sheets (``xlsx:sheets_unreadable:<sheets>``): the rest is answered,
    PARTIAL, and what is missing is named. Only the reader that writes a marker is believed
    to have (a DOCX's text may spell one)."""
    if page.kind != "document":
        return None
    if page.pages is not None:  # PDF: the one reader whose documents have pages
        missing, what = unreadable_pages(content), "pdf:pages"
    elif reader_for(page.content_type, b"", page.url) == "xlsx":
        missing, what = unreadable_sheets(content), "xlsx:sheets"
    else:
        return None
    if not missing:
        return None
    return ErrorCode.CORRUPT_DOCUMENT, f"{what}_unreadable:{page_ranges(missing)}"


def page_ranges(numbers: list[int]) -> str:
    """``numbers`` (ascending) as ``2,4-6``; past ``MAX_RANGES`` ranges the rest is counted
    (``+12``), so a reply line stays short whatever a file holds."""
    ranges: list[list[int]] = []
    for number in numbers:
        if ranges and number == ranges[-1][1] + 1:
            ranges[-1][1] = number
        else:
            ranges.append([number, number])
    shown = [str(a) if a == b else f"{a}-{b}" for a, b in ranges[:MAX_RANGES]]
    left = sum(b - a + 1 for a, b in ranges[MAX_RANGES:])
    return ",".join(shown + ([f"+{left}"] if left else []))


def page_fields(page: Page) -> list[Field]:
    """``PAGES n`` for a paged document, and ``PAGES_READ m`` when fewer were read."""
    if page.pages is None:
        return []
    fields: list[Field] = [("PAGES", str(page.pages))]
    if page.pages_read is not None and page.pages_read < page.pages:
        fields.append(("PAGES_READ", str(page.pages_read)))
    return fields


def fetch_limits(params: Params, services: PagesServices) -> tuple[int, int | None]:
    """fetch's ``(MAX_CHARS, MAX_PAGES)`` (None: ``fetch.max_pages``) once its sources and
    limits are checked as fetch checks them, for either route; raises FieldError."""
    urls, key = params.texts("URL"), params.opt_text("FILE_KEY")
    _check_sources(urls, key, services.config.docs.max_urls, params.integer("START"))
    if key is not None and params.opt_integer("MAX_AGE") is not None:
        raise FieldError(ErrorCode.INVALID_FIELD, "MAX_AGE applies to URL: a FILE_KEY is fixed")
    if key is not None and params.opt_text("RENDER") is not None:
        raise FieldError(ErrorCode.INVALID_FIELD, "RENDER applies to URL: a FILE_KEY is fixed")
    return _max_chars(params, services), _max_pages(params, services, key)


def _max_chars(params: Params, services: PagesServices) -> int:
    limits = services.config.fetch
    max_chars = params.opt_integer("MAX_CHARS") or limits.default_max_chars
    if max_chars > limits.max_chars_cap:
        raise FieldError(ErrorCode.INVALID_FIELD, f"MAX_CHARS above {limits.max_chars_cap}")
    return max_chars


def _max_pages(params: Params, services: PagesServices, key: str | None) -> int | None:
    """MAX_PAGES as given (None: ``fetch.max_pages``), at most ``fetch.max_pages_cap``; it
    reads a URL: a FILE_KEY's snapshot is fixed."""
    max_pages = params.opt_integer("MAX_PAGES")
    if max_pages is None:
        return None
    if key is not None:
        raise FieldError(ErrorCode.INVALID_FIELD, "MAX_PAGES applies to URL: a FILE_KEY is fixed")
    cap = services.config.fetch.max_pages_cap
    if max_pages > cap:
        raise FieldError(ErrorCode.INVALID_FIELD, f"MAX_PAGES above {cap}")
    return max_pages


def _check_sources(urls: list[str], key: str | None, max_urls: int, start: int) -> None:
    if not urls and key is None:
        raise FieldError(ErrorCode.MISSING_FIELD, "URL or FILE_KEY")
    if urls and key is not None:
        raise FieldError(ErrorCode.INVALID_FIELD, "give URL or FILE_KEY, not both")
    if len(urls) > max_urls:
        raise FieldError(ErrorCode.INVALID_FIELD, f"more than {max_urls} URL fields")
    if len(urls) > 1 and start:
        raise FieldError(ErrorCode.INVALID_FIELD, "START pages one source: use its FILE_KEY")


def held_summary(services: PagesServices, key: str) -> list[Field] | None:
    """``summary_fields``' lines for ``key`` when the cache's memory tier holds them (a
    peek: nothing counted, nothing waited for), else None."""
    return _summary_lines(services.cache.peek(SUMMARY_NAMESPACE, key))


async def summary_fields(services: PagesServices, key: str, content: str) -> list[Field]:
    """SUMMARY lines for the whole of ``content`` (at most ``summarize.max_text_chars`` of it
    read), by the summarize op's extractive method, in the worker pool: CPU work on a whole
    page (about 0.3 s for 200,000 chars), so it is kept under ``key`` (the snapshot's fileKey
    and view) for as long as the snapshot, and paging a long page pays for it once."""
    cached = _summary_lines(await services.cache.get(SUMMARY_NAMESPACE, key))
    if cached is not None:
        return cached
    limit = services.config.summarize.max_text_chars
    work = functools.partial(summarize_extractive, content[:limit], SUMMARY_BULLETS)
    bullets = list(
        await services.pool.run(work, deadline=op_deadline(services), shape=tuple[str, ...])
    )
    await services.cache.set(
        SUMMARY_NAMESPACE, key, bullets, ttl_s=services.config.cache.fetch_ttl_s
    )
    return [("SUMMARY", bullet) for bullet in bullets]


def _summary_lines(cached: object) -> list[Field] | None:
    """The SUMMARY lines a cached summary holds; None when it is not one (absent, or
    not a list of strings)."""
    if isinstance(cached, list) and all(isinstance(bullet, str) for bullet in cached):
        return [("SUMMARY", bullet) for bullet in cached]
    return None


async def prepare_fetch(services: PagesServices, page: Page) -> None:
    """What a default fetch of ``page`` (EXTRACT text, MAX_CHARS fetch.default_max_chars)
    computes and keeps, done ahead: its fileKey's snapshot and, for a page longer than one
    reply, the SUMMARY of that view. Search's prefetch calls it, so the fetch that follows
    costs what a cache hit costs (bench/prefetch.py)."""
    key = file_key(page)
    await hold(services, key, page)
    content = content_of(page)
    long = len(content) > services.config.fetch.default_max_chars  # ops_fetch's PARTIAL test
    if page.kind in ("html", "json", "text") and long:
        await summary_fields(services, f"{key}:text", content)


@dataclass(frozen=True)
class Described:
    """What fetch's reply says of one loaded view besides its window, the same for any START
    and MAX_CHARS: the fields before the window's (TITLE to FILE_KEY), the CITE after them,
    the page's SCOPE and its ``empty_error``."""

    head: tuple[Field, ...]
    cite: Field
    scope: tuple[str, ...]
    error: tuple[ErrorCode, str] | None


def describe(page: Page, content: str, file_key: str) -> Described:
    """``fetch_result``'s description of ``content``, the view of ``page`` it sends."""
    fields: list[Field] = [("TITLE", page.title)] if page.title else []
    fields += declared_fields(page)
    fields.append(("WORD_COUNT", str(page.word_count)))
    if page.page_type:  # only when the extractor can tell (extract.PAGE_TYPES)
        fields.append(("PAGE_TYPE", page.page_type))
    fields += page_fields(page)
    fields.append(("CACHED", "true" if page.cached else "false"))
    fields += render_fields(page)
    if (when := cached_at(page)) is not None:
        fields.append(("CACHED_AT", when))
    fields += [("URL", page.url), ("FILE_KEY", file_key)]
    cited = cite(page.url, page.title)
    error = empty_error(page, content) or unreadable_error(page, content)
    return Described(tuple(fields), cited, (page.host,), error)


def fetch_result(
    content: str, part: tuple[int, int], described: Described, summary: list[Field]
) -> Result:
    """The reply for ``part`` (START, MAX_CHARS) of ``content``, a page's view as
    ``described``: PARTIAL, with ``summary`` when cut at MAX_CHARS, or when the page yields no
    text (with ``ERROR empty_content:<why>``, or for a document without a text layer
    ``ERROR no_text_layer:<why>``, SPEC R-2; never an OK with empty content)."""
    text, paging, status = window(content, *part)
    fields = (*described.head, *paging, *summary, described.cite)
    if described.error is not None:
        status = Status.PARTIAL
    return Result(text, described.scope, fields, status, described.error)
