"""Loading a page: the one way a web op gets a URL's content (fetch, meta, resolve, summarize,
and search's prefetch).

    page = await load_page(services, url, deadline=op_deadline(services))

Order of work: the URL gate; the fetch cache (24 h, seed 000); a download already in flight for
the same URL (single-flight: concurrent loads share one request); the "fetch" rate bucket; the
guarded client with robots.txt honoured; then extraction in the worker pool (``web.workers``,
``csp_web.infra.workers``; a document: its reader in a process of its own, ``documents.py``).
What is cached is a ``Page``: the extracted views of the body (Markdown, outline, compact
JSON, plain text) and the head's metadata, never the raw body, headers or credentials.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import trio

from csp_web.config import GuardConfig
from csp_web.core.api import budget
from csp_web.core.api.deadlines import work_deadline
from csp_web.core.api.errors import OpError
from csp_web.net import FetchResult, LargerBody, check_url, decode_text
from protocol import ErrorCode
from specialists.formats import PAGE_MARKER, Document, Limits

from .documents import Bounds, read_document, reader_for, reads_text
from .emptiness import NO_TEXT, empty_why, is_empty
from .flights import Flight, Flights, follow, lead
from .reading import read_page
from .services import PagesServices

Kind = Literal["html", "json", "text", "document", "other"]

CACHE_NAMESPACE = "fetch"
SNAPSHOT_VERSION = 5  # bump when Page changes shape: older cached snapshots then read as misses
# What is left of a task's deadline when its network work must stop, so that the op can still
# answer FAIL fetch_failed:timeout (with its URL field) before the dispatcher's timeout_exceeded.

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/x-markdown"})  # CSV: documents.py
_HTML_SNIFF = re.compile(rb"\s*<(?:!doctype\s+html|html|head|body|title)[\s>]", re.I)
_WORD = re.compile(r"\w+")
_PAGE_MARKERS = re.compile("^" + re.escape(PAGE_MARKER).replace(r"\{\}", r"\d+") + "$", re.M)


@dataclass(frozen=True)
class Page:
    """A snapshot of one fetched URL, as cached.

    ``url`` is the final URL after redirects; ``redirect_chain`` runs from the URL requested to
    ``url``. ``kind`` says which views are filled: html gives ``markdown``, ``outline``,
    ``meta`` and ``refresh`` (a meta-refresh target, absolute); json and text give ``text``
    (the decoded body) and ``json`` when the body parses as JSON; document (a PDF, an office
    file: ``documents.FORMATS``) gives ``markdown``, and ``pages``/``pages_read`` when it has
    pages, ``no_text`` why it has no text layer (``encrypted``, ``scanned``). ``fetched_at``
    is when it was downloaded (Unix seconds: MAX_AGE and CACHED_AT); ``empty`` says why the
    main view holds no text (``emptiness.py``), None when it holds some. ``shell`` names the
    tell that served HTML is an app shell (``appshell.py``); ``rendered`` is True for a page
    read from the DOM the browser rendered, ``render_reason`` says why it was rendered, or why
    not (fetch's RENDERED and RENDER_REASON). ``cached`` is True when this load was answered
    from the cache; it is not stored.
    """

    url: str
    status: int
    content_type: str
    kind: Kind
    title: str | None = None
    markdown: str = ""
    outline: str = ""
    text: str = ""
    json: str | None = None
    description: str | None = None
    word_count: int = 0
    page_type: str | None = None
    redirect_chain: tuple[str, ...] = ()
    meta: Mapping[str, str] = field(default_factory=dict)
    refresh: str | None = None
    fetched_at: float = 0.0
    empty: str | None = None
    shell: str | None = None
    rendered: bool = False
    render_reason: str | None = None
    pages: int | None = None
    pages_read: int | None = None
    no_text: str | None = None
    cached: bool = False

    @property
    def host(self) -> str:
        """The final URL's host, as SCOPE names it."""
        return urllib.parse.urlsplit(self.url).hostname or ""


def normalise_url(url: str, services: PagesServices) -> str:
    """The cache and single-flight key of ``url``: the URL gate's canonical spelling (lower-case
    scheme and host, default port dropped, fragment dropped). Raises OpError(URL_REJECTED |
    SSRF_BLOCKED) for a URL the gate refuses, before any I/O."""
    return _canonical(url, services.config.guard)


# Accepted URLs only (a refusal raises, and lru_cache keeps no exception), at most 1,024 of
# max_url_chars each; keyed by the guard's settings too, so a reload's new rules apply at
# once. The gate's rules ran on every cache hit: 4.4 % of the daemon's CPU per hit (py-spy
# --gil over /tmp's cached fetch loop, load 6-12; issue 26).
@functools.lru_cache(maxsize=1024)
def _canonical(url: str, guard: GuardConfig) -> str:
    return check_url(url, guard).url


def op_deadline(services: PagesServices) -> float:
    """The trio time by which an op's network work must end: the guard's ``timeout_s`` from
    now, or sooner when the task's own deadline (less its reserve) comes first."""
    return min(trio.current_time() + services.config.guard.timeout_s, work_deadline())


async def load_page(
    services: PagesServices,
    url: str,
    *,
    no_cache: bool = False,
    max_age_s: float | None = None,
    deadline: float,
    background: bool = False,
    max_pages: int | None = None,
) -> Page:
    """The page at ``url``: from the cache unless ``no_cache`` (or the snapshot is ``max_age_s``
    old or older), else downloaded (or shared with a download of the same URL already in
    flight) and cached for ``cache.fetch_ttl_s``; ``no_cache`` neither reads nor writes it. A
    paged document holds its first ``max_pages`` pages (None: ``fetch.max_pages``); a
    snapshot read with fewer is a miss, one read with more is cut (``within_pages``).

    ``deadline`` is trio time and bounds the rate-limit wait and the download; the download
    itself gets ``guard.timeout_s`` at most, as every fetch does. ``background``
    loads (search prefetch) take a rate token only when the bucket is at least half full.

    Raises OpError: URL_REJECTED, SSRF_BLOCKED, DNS_FAILED, ROBOTS_DISALLOWED,
    TOO_MANY_REDIRECTS, TOO_LARGE, FETCH_FAILED ("timeout", or "http_<status>" for a status
    of 400 or more, which is not cached), RATE_LIMITED (foreground: no token before
    ``deadline``; background: "fetch:background" when the bucket is below half); a document's
    reader's codes (``documents.read_document``); WORKER_FAILED when extraction's worker died
    or passed ``deadline``.
    """
    key = normalise_url(url, services)
    pages = max_pages or services.config.fetch.max_pages
    while True:
        if not no_cache:
            page = within_pages(fresh(await _cached(services, key), max_age_s), pages)
            if page is not None:
                return page
        flights = services.flights
        flight = flights.get(key)
        if flight is None:
            page = await _lead(
                services,
                key,
                flights,
                deadline=deadline,
                background=background,
                max_pages=pages,
                keep=not no_cache,
            )
            return within_pages(page, pages) or page  # a fleet peer's read may hold more
        page = within_pages(await _follow(flight, deadline), pages)
        if page is not None:
            return page
        # The leader was cancelled before it had an outcome, or read fewer of a document's pages
    # than asked: the next round leads or joins anew.


async def _lead(
    services: PagesServices,
    key: str,
    flights: Flights,
    *,
    deadline: float,
    background: bool,
    max_pages: int,
    keep: bool,
) -> Page:
    download = functools.partial(
        _download_once,
        services,
        key,
        deadline=deadline,
        background=background,
        max_pages=max_pages,
        keep=keep,
    )
    page = await lead(flights, key, download, shareable=lambda exc: not _own_failure(exc))
    assert isinstance(page, Page)
    return page


def _own_failure(exc: OpError) -> bool:
    """Whether ``exc`` came from the leader's own budget (its deadline, its rate token) rather
    than from the URL: followers, with budgets of their own, then try again themselves."""
    timeout = exc.code is ErrorCode.FETCH_FAILED and exc.detail == "timeout"
    return timeout or exc.code is ErrorCode.RATE_LIMITED


async def _follow(flight: Flight, deadline: float) -> Page | None:
    """The leader's page, its error re-raised, or None when the leader ended without an
    outcome for everyone (cancelled, or stopped by its own deadline or rate token)."""
    page = await follow(flight, deadline, OpError(ErrorCode.FETCH_FAILED, "timeout"))
    assert page is None or isinstance(page, Page)
    return page


async def _download_once(
    services: PagesServices,
    key: str,
    *,
    deadline: float,
    background: bool,
    max_pages: int,
    keep: bool,
) -> Page:
    """``_download``, or a peer daemon's download of the same URL when one is in flight
    (``csp_web.infra.redis_flight``, with ``redis.url``)."""
    download = functools.partial(
        _download,
        services,
        key,
        deadline=deadline,
        background=background,
        max_pages=max_pages,
        keep=keep,
    )
    if services.fleet_flights is None:
        return await download()
    return await services.fleet_flights.run(
        key,
        deadline=deadline,
        lead=download,
        reuse=functools.partial(_cached, services, key),
        shareable=lambda exc: not _own_failure(exc),
    )


async def _download(
    services: PagesServices,
    key: str,
    *,
    deadline: float,
    background: bool,
    max_pages: int,
    keep: bool,
) -> Page:
    """The page downloaded now, kept in the fetch cache when ``keep`` (NO_CACHE neither reads
    nor writes it)."""
    await _take_token(services, deadline=deadline, background=background)
    # One request's time, whatever the caller's deadline (seed 000: "Timeout: 10s per
    # request"): a research job passed its whole two minutes to a source that dripped.
    remaining = min(deadline - trio.current_time(), services.config.guard.timeout_s)
    if remaining <= 0:
        raise OpError(ErrorCode.FETCH_FAILED, "timeout")
    result = await services.client.fetch(
        key, respect_robots=True, deadline_s=remaining, larger_body=document_body(services)
    )
    if result.status_code >= 400:
        raise OpError(ErrorCode.FETCH_FAILED, f"http_{result.status_code}")
    reader = reader_for(result.content_type, result.body, result.url)
    if reader is not None:
        page = await document_page(services, result, reader, max_pages, deadline)
    else:
        page = await extracted(services, result)
    if keep:
        await _store(services, key, page)
    return page


async def extracted(services: PagesServices, result: FetchResult) -> Page:
    """``build_page`` of ``result``, run in the worker pool (``web.workers``): extraction is
    CPU-bound (about 1 s on adversarial input), so it leaves the event loop and its core;
    one past ``op_deadline`` from now (the task's own deadline, and for work no task bounds,
    search's prefetch, ``guard.timeout_s``) is cut there (``worker_failed:timeout``). The
    headers stay in the daemon (the page needs none of them)."""
    bare = dataclasses.replace(result, headers=httpx.Headers())
    build = functools.partial(build_page, bare, fetched_at=time.time())
    return await services.pool.run(build, deadline=op_deadline(services), shape=Page)


def document_body(services: PagesServices) -> LargerBody:
    """The body cap of a response the reader table serves (``fetch.max_document_bytes``),
    judged as ``reader_for`` judges the whole body: by type, then magic bytes, then suffix."""
    return LargerBody(
        services.config.fetch.max_document_bytes,
        "max_document_bytes",
        lambda media_type, url, head: reader_for(media_type, head, url) is not None,
    )


async def document_page(
    services: PagesServices, result: FetchResult, reader: str, max_pages: int, deadline: float
) -> Page:
    """The snapshot of a document response: its reader's Markdown, read in a worker process
    within ``fetch``'s reader bounds and by ``deadline``."""
    config = services.config.fetch
    bounds = Bounds(memory_bytes=config.reader_memory_bytes, cpu_s=config.reader_cpu_s)
    limits = Limits(
        max_pages=max_pages,
        max_rows=config.max_rows,
        max_entries=config.max_entries,
        max_chars=config.max_document_chars,
        base_url=result.url,
    )
    body = result.body
    if reads_text(reader):  # a CSV's bytes decode by the page rules: its HTTP charset counts
        text = decode_text(body, charset=result.charset, content_type=result.content_type)
        body = text.encode("utf-8")
    document = await read_document(reader, body, limits, deadline, bounds=bounds)
    return _from_document(result, document)


def _from_document(result: FetchResult, document: Document) -> Page:
    declared = {"author": document.author, "published": document.published}
    declared["lang"] = document.lang
    return Page(
        url=result.url,
        status=result.status_code,
        content_type=result.content_type,
        kind="document",
        title=document.title,
        markdown=document.markdown,
        word_count=document_words(document.markdown),
        redirect_chain=result.redirect_chain,
        meta={key: value for key, value in declared.items() if value},
        fetched_at=time.time(),
        empty=None if document.markdown.strip() else NO_TEXT,
        pages=document.pages,
        pages_read=document.pages_read,
        no_text=document.no_text,
    )


def document_words(markdown: str) -> int:
    """The words of a document's Markdown, its page markers left out."""
    return len(_WORD.findall(_PAGE_MARKERS.sub("", markdown)))


def within_pages(page: Page | None, max_pages: int) -> Page | None:
    """``page`` as a load asking for ``max_pages`` pages sees it: None when it is a document
    read with fewer pages than that (and than it has), cut at the page marker past
    ``max_pages`` when it was read with more; any other page as it is."""
    if page is None or page.pages is None or page.pages_read is None:
        return page
    if page.pages_read < min(page.pages, max_pages):
        return None
    if page.pages_read <= max_pages:
        return page
    marker = page.markdown.find(PAGE_MARKER.format(max_pages + 1))
    markdown = page.markdown[:marker].rstrip() if marker >= 0 else page.markdown
    return dataclasses.replace(
        page,
        markdown=markdown,
        word_count=document_words(markdown),
        pages_read=max_pages,
        no_text=page.no_text if markdown.strip() else page.no_text or "max_pages",
    )


async def _take_token(services: PagesServices, *, deadline: float, background: bool) -> None:
    bucket = services.limits.bucket("fetch")
    if bucket is None:
        return
    if not background:
        await bucket.acquire(deadline=deadline)
    elif not await bucket.acquire_background():
        raise OpError(ErrorCode.RATE_LIMITED, "fetch:background")


async def _cached(services: PagesServices, key: str) -> Page | None:
    return from_snapshot(await services.cache.get(CACHE_NAMESPACE, key))


def fresh(page: Page | None, max_age_s: float | None) -> Page | None:
    """``page`` unless it was fetched ``max_age_s`` seconds ago or earlier (Firecrawl's maxAge:
    MAX_AGE 0 never reads the cache); None stays None."""
    if page is None or max_age_s is None:
        return page
    return page if time.time() - page.fetched_at < max_age_s else None


async def _store(services: PagesServices, key: str, page: Page) -> None:
    ttl_s = services.config.cache.fetch_ttl_s
    await services.cache.set(CACHE_NAMESPACE, key, to_snapshot(page), ttl_s=ttl_s)
    if page.url != key:
        # The final URL names the same content; fetched directly it has no redirect chain.
        direct = dataclasses.replace(page, redirect_chain=(page.url,))
        await services.cache.set(CACHE_NAMESPACE, page.url, to_snapshot(direct), ttl_s=ttl_s)


def to_snapshot(page: Page) -> dict[str, Any]:
    """``page`` as plain data for the cache (builtins only, so a refactor never breaks
    unpickling); ``cached`` is left out."""
    data = {f.name: getattr(page, f.name) for f in dataclasses.fields(page) if f.name != "cached"}
    data["redirect_chain"] = list(page.redirect_chain)
    data["meta"] = dict(page.meta)
    data["v"] = SNAPSHOT_VERSION
    return data


def from_snapshot(data: Any) -> Page | None:
    """The Page a cached snapshot holds, marked ``cached``; None for a miss or an entry of
    another shape or version."""
    if not isinstance(data, dict) or data.get("v") != SNAPSHOT_VERSION:
        return None
    values = {k: v for k, v in data.items() if k != "v"}
    values["redirect_chain"] = tuple(values.get("redirect_chain") or ())
    try:
        return Page(**values, cached=True)
    except TypeError:
        return None


def build_page(result: FetchResult, *, fetched_at: float = 0.0) -> Page:
    """The snapshot of a fetched response: every view its content type allows, and why its
    main view is empty when it is. Pure, CPU-bound; runs in the worker pool."""
    kind = content_kind(result.content_type, result.body)
    base = Page(
        url=result.url,
        status=result.status_code,
        content_type=result.content_type,
        kind=kind,
        redirect_chain=result.redirect_chain,
        fetched_at=fetched_at,
    )
    if kind == "other":
        return base
    text = decode_text(result.body, charset=result.charset, content_type=result.content_type)
    if kind == "html":
        page = html_page(base, text)
    else:
        page = dataclasses.replace(
            base, text=text, json=compact_json(text), word_count=len(_WORD.findall(text))
        )
    main = page.markdown if kind == "html" else page.text
    return dataclasses.replace(page, empty=empty_why(kind, text)) if is_empty(main) else page


def html_page(base: Page, html: str) -> Page:
    """``base`` with the views of ``html`` (``reading.read_page``): the extractor's Markdown,
    the outline, the head's metadata, and the app-shell tell when the text looks written by
    scripts."""
    reading = read_page(html, base.url)
    article, head = reading.article, reading.head
    return dataclasses.replace(
        base,
        title=article.title or head.meta.get("title"),
        markdown=article.markdown,
        outline=reading.outline,
        description=article.description or head.meta.get("description"),
        word_count=article.word_count,
        page_type=article.page_type,
        meta=head.meta,
        refresh=head.refresh,
        shell=reading.shell,
    )


def content_kind(content_type: str, body: bytes) -> Kind:
    """Which views a body of ``content_type`` gets; an absent type is sniffed as HTML or
    UTF-8 text, else refused."""
    if content_type in _HTML_TYPES:
        return "html"
    if content_type in ("application/json", "text/json") or content_type.endswith("+json"):
        return "json"
    if content_type in _TEXT_TYPES:
        return "text"
    if content_type:
        return "other"
    if _HTML_SNIFF.match(body[:512]):
        return "html"
    return "text" if _is_utf8_text(body) else "other"


def _is_utf8_text(body: bytes) -> bool:
    if b"\x00" in body:
        return False
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def compact_json(text: str) -> str | None:
    """``text`` re-serialised compactly when it is one JSON value (RFC 8259: no NaN or
    Infinity), else None."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        return None
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


async def load_for_op(
    services: PagesServices, url: str, *, no_cache: bool = False, asked: str | None = None
) -> Page:
    """``load_page`` under the op's deadline, its failures carrying a ``URL`` field as seed
    000's ``ERROR fetch_failed:timeout`` / ``URL <url>`` reply shows: the URL the op was
    asked, ``asked`` when ``url`` is a hop the op follows on its own (resolve's meta
    refresh), never the hop (docs/ops.md: "the URL asked")."""
    await budget.take("fetches")  # each page asked for, from the cache or not (SPEC D-3)
    try:
        return await load_page(services, url, no_cache=no_cache, deadline=op_deadline(services))
    except OpError as exc:
        kept = tuple(field for field in exc.fields if field[0] != "URL")
        raise OpError(exc.code, exc.detail, fields=(*kept, ("URL", asked or url))) from exc
