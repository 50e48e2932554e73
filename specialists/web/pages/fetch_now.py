"""fetch's hot route: one URL whose snapshot the cache's memory tier holds is answered at once,
in the connection's reader (``Op.hot``, ``csp_web/core/dispatch/hot.py``), with no task,
admission, worker thread or cache write.

    TASK REQ:fetch https://example.com/article IN:WEB OUT:CONTENT      # held in memory:
    ID 7                                                               # answered here

The answer is exactly ``ops_fetch.fetch``'s for the same frame: both check their fields with
``fetch_limits`` and answer the loaded page with ``fetch_many.answer_page`` (board entry,
reply fields, BOARD lines); this route adds the board turn, hit counts and audit
(``WebAudit(url, cache_hit=True)``) fetch's load and ``web_audit`` make. Anything that fetch
would do differently or would wait for declines (None), and the frame runs as a task: a
field this route does not know, or a known one with a value it does not answer (several URLs,
a FILE_KEY, NO_CACHE, MAX_AGE 0, RENDER always), a field fetch refuses (MAX_CHARS or
MAX_PAGES past their caps, START past the end, an EXTRACT view the page lacks), Firecrawl
asked first, an app shell, a snapshot not in memory or too old for MAX_AGE, a fileKey whose
snapshot ``hold`` would write again, or a long page's SUMMARY not in memory. Nothing is
changed before it is known that the route answers, but for what it derives from the cache
entry alone (``_View``), which it keeps in the entry's memo for the entry's next hits.
``likely_hit`` asks the same of the frame before its turn, so one that will decline does
not take an instant turn.

Issue 26 goal 1, ``python bench/fetch.py --quick`` A/B on one loaded 2-core host (load 3.9-5.9):
daemon CPU per hit against a ping's 4.67-5.78x as a task, 3.36-3.62x here; round trip p50
2.58-2.95x a ping's as a task, 1.83-2.36x here. With the entry's memo (``_View``) and the
protocol's and outbox's cheaper value checks, at load 2.0-2.8: 3.38-3.45x against 3.92-4.55x,
round trip p50 2.07-2.08x against 3.05-3.31x; ``python bench/fetch_cpu.py --rounds 3000``
(client and daemon, hit less ping): 854-870 us against 1,278-1,469 us (load 1.4-2.4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from csp_web.core.api.context import OpContext
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import UNIVERSAL, Params, past_the_end
from csp_web.core.api.replies import Result
from csp_web.infra.cache import Memo, approximate_size
from protocol import Field, Task

from ..services import WebNotes
from .fetch_fields import SUMMARY_NAMESPACE, Described, describe, fetch_limits, held_summary
from .fetch_many import answer_page
from .filekeys import file_key, holds
from .loaders import page_view, plan
from .loading import (
    CACHE_NAMESPACE,
    Page,
    fresh,
    from_snapshot,
    normalise_url,
    to_snapshot,
    within_pages,
)
from .services import PagesServices

# The fields this route answers as fetch does, each with the one value it answers it with
# (None: any value fetch accepts). Any other field, or another value, declines: a field
# added to fetch stays its task's until it is handled here.
_ANSWERED: dict[str, object] = {
    "URL": None,  # one (``_plain``)
    "EXTRACT": None,  # a view the page lacks: declined by ``page_view``
    "MAX_CHARS": None,  # past its cap: declined by ``fetch_limits``
    "START": None,  # past the end: declined by ``_held_summary``
    "MAX_PAGES": None,
    "MAX_AGE": None,  # 0 or too old: declined by ``fresh``
    "RENDER": None,  # always: declined by ``_plain``
    "BOARD": None,
    "NO_CACHE": False,
}


def likely_hit(task: Task, services: PagesServices) -> bool:
    """Whether ``answer_hit`` will likely answer ``task``: one URL (inline or its one URL
    field) whose snapshot the memory tier holds, and none of the cheap declines (a field the
    route does not answer, NO_CACHE, MAX_AGE 0, RENDER always). A guess asked before the
    frame's turn: a wrong one costs the frame a second turn."""
    urls = [value for name, value in task.fields if name == "URL"]
    if task.inline is not None:
        urls.append(task.inline)
    if len(urls) != 1 or any(_declines(name, value) for name, value in task.fields):
        return False
    if task.get("RENDER") is None and services.config.fetch.render == "always":
        return False
    try:
        key = normalise_url(urls[0], services)
    except OpError:
        return False  # refused by the gate: the task answers it
    return services.cache.peek(CACHE_NAMESPACE, key) is not None


def _declines(name: str, value: str) -> bool:
    """Whether a frame's field ``name`` with ``value`` (its text) makes ``answer_hit``
    decline whatever the cache holds: unknown to it, NO_CACHE, MAX_AGE 0 or RENDER always."""
    return (
        (name not in _ANSWERED and name not in UNIVERSAL)
        or (name == "NO_CACHE" and value != "false")
        or (name == "MAX_AGE" and value == "0")
        or (name == "RENDER" and value == "always")
    )


def answer_hit(params: Params, ctx: OpContext, services: PagesServices) -> Result | None:
    """``fetch``'s result for ``params`` when its one URL is answered from the memory tier
    as it would be by the task (see the module), else None, having changed nothing."""
    try:
        part = (params.integer("START"), fetch_limits(params, services)[0])
    except OpError:
        return None  # its task refuses it
    if not _plain(params, services):
        return None
    url = params.texts("URL")[0]
    held = _held_page(params, services, url)
    if held is None:
        return None
    page, snapshot, memo = held
    view = _held_view(page, memo, params.text("EXTRACT"), url)
    if view is None:
        return None  # the task answers unsupported_content
    summary = _held_summary(services, (view, snapshot), part, params.text("EXTRACT"))
    if summary is None:
        return None
    services.cache.count_hit(CACHE_NAMESPACE)  # as the task's load counts it
    if sum(part) < len(view.content):  # cut: its SUMMARY was read from the cache, as the task's
        services.cache.count_hit(SUMMARY_NAMESPACE)
    services.board.turn(ctx.peer, services.config.docs.board)
    notes = WebNotes(url)
    notes.cache_hit = True
    loaded = (page, view.content, view.key)
    result = answer_page(params, ctx, services, loaded, part, summary, described=view.described)
    return notes.attach(result)


def _plain(params: Params, services: PagesServices) -> bool:
    """Whether ``params`` name only fields this route answers, each with a value it answers
    (one URL, no RENDER always), of a daemon that reads its own cache first (no Firecrawl)."""
    for name in params.given():
        if name not in _ANSWERED or _ANSWERED[name] not in (None, params.json(name)):
            return False
    render = params.opt_text("RENDER") or services.config.fetch.render
    return (
        len(params.texts("URL")) == 1
        and render != "always"
        and plan(services)[0][0].loader == "direct"
    )


def _held_page(
    params: Params, services: PagesServices, url: str
) -> tuple[Page, dict[str, Any], Memo] | None:
    """The snapshot ``load_page`` would read first for ``url`` (fresh enough for MAX_AGE,
    read with enough of a document's pages), when the memory tier holds it and it would
    not be rendered: the page, its ``to_snapshot`` (what ``hold`` keeps) and the memo of
    its cache entry (empty for a document cut at MAX_PAGES, which is made anew); else
    None."""
    try:
        key = normalise_url(url, services)
    except OpError:
        return None
    held = services.cache.peek_memo(CACHE_NAMESPACE, key)
    if held is None:
        return None
    entry, memo = held
    if _PAGE not in memo:
        stored = _stored(entry)
        memo.keep(
            _PAGE, stored, _PAGE_BYTES + (0 if stored[1] is entry else approximate_size(stored[1]))
        )
    stored, snapshot = memo[_PAGE]
    if stored is None:
        return None  # another version's snapshot: a miss, as the task reads it
    pages = params.opt_integer("MAX_PAGES") or services.config.fetch.max_pages
    page = within_pages(fresh(stored, params.opt_integer("MAX_AGE")), pages)
    if page is None or (page.kind == "html" and page.shell is not None):
        return None  # an app shell: rendered, or marked as not, by the task (rendering.py)
    if page is not stored:  # a document cut at MAX_PAGES: its own snapshot, no memo
        return page, to_snapshot(page), Memo()
    return page, snapshot, memo


def _stored(entry: object) -> tuple[Page | None, dict[str, Any]]:
    """The Page a fetch cache entry holds (None: another version's) and its ``to_snapshot``:
    the entry's own dict when equal to it (a snapshot this daemon wrote is), so the memo
    holds no copy of it."""
    page = from_snapshot(entry)
    if page is None:
        return None, {}
    snapshot = to_snapshot(page)
    return page, (entry if entry == snapshot and isinstance(entry, dict) else snapshot)


@dataclass(frozen=True)
class _View:
    """What every hit of one cache entry derives alike for one EXTRACT view of its page:
    the view, its fileKey and the reply's description of it, which refer to the page's own
    strings but for a few short ones. Kept in the entry's memo (``MemoryTier``), so
    it goes with the entry: a new snapshot, its expiry or an invalidation makes a new one.
    Issue 26: the page, view, fileKey and reply fields made again on each hit cost 140-165 us
    of CPU per hit in ``_held_page``, ``_held_summary``, ``answer_page`` and ``file_key``;
    kept here, 53 (those and ``_held_view``, timed in an in-process daemon over 2,000 hits of
    bench/fetch_cpu.py's page, A/B twice, load 1.5-1.7)."""

    content: str
    key: str
    described: Described


_PAGE = ("fetch_now", "page")  # the entry's Page and snapshot (``_stored``), in its memo
# What a Page made from a snapshot holds beyond the snapshot's own strings: 304 bytes by
# tracemalloc (100 Pages of one snapshot), counted as 512 toward the memory tier's bound.
_PAGE_BYTES = 512


def _held_view(page: Page, memo: Memo, extract: str, url: str) -> _View | None:
    """``page``'s ``_View`` for ``extract`` from ``memo``, made and kept there at the entry's
    first hit (at most one per EXTRACT value); None when the page lacks that view."""
    view = memo.get(("fetch_now", extract))
    if isinstance(view, _View):
        return view
    try:
        content = page_view(page, extract, url)
    except OpError:
        return None
    key = file_key(page)
    view = _View(content, key, describe(page, content, key))
    described = view.described
    memo.keep(("fetch_now", extract), view, approximate_size((described.head, described.cite, key)))
    return view


def _held_summary(
    services: PagesServices,
    held: tuple[_View, dict[str, Any]],
    part: tuple[int, int],
    extract: str,
) -> list[Field] | None:
    """The SUMMARY lines fetch adds for ``part`` of ``held``'s view ([] when it is not cut),
    when the page (its snapshot) needs no write under its fileKey (``holds``) and they are
    in memory; else None."""
    view, snapshot = held
    start, max_chars = part
    if past_the_end(start, len(view.content)) or not holds(services, view.key, snapshot):
        return None
    if start + max_chars >= len(view.content):
        return []
    return held_summary(services, f"{view.key}:{extract}")
