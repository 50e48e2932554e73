"""fetch's hot route: one URL whose snapshot the cache's memory tier holds is answered at once,
in the connection's reader (``Op.hot``, ``csp_web/core/dispatch/hot.py``), with no task,
admission, worker thread or cache write.

    TASK REQ:fetch https://example.com/article IN:WEB OUT:CONTENT      # held in memory:
    ID 7                                                               # answered here

The answer is exactly ``ops_fetch.fetch``'s for the same frame: the same ``fetch_result``,
board turn and entry, hit count and audit (``WebAudit(url, cache_hit=True)``). Anything that
fetch would do differently or would wait for declines (None), and the frame runs as a task:
several URLs or a FILE_KEY, NO_CACHE, a field fetch refuses (MAX_CHARS or MAX_PAGES past
their caps, START past the end, an EXTRACT view the page lacks), Firecrawl asked first, a page
that would be rendered (RENDER always, or an app shell), a snapshot not in memory or too old
for MAX_AGE, a fileKey whose snapshot ``hold`` would write again, or a long page's SUMMARY not
in memory. Nothing is changed before it is known that the route answers.

Issue 26 goal 1, ``python bench/fetch.py --quick`` A/B on one loaded 2-core host (load 3.9-5.9):
daemon CPU per hit against a ping's 4.67-5.78x as a task, 3.36-3.62x here; round trip p50
2.58-2.95x a ping's as a task, 1.83-2.36x here.
"""

from __future__ import annotations

import dataclasses

from csp_web.core.api.context import OpContext
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import Params
from csp_web.core.api.replies import Result
from protocol import Field, Task

from ..services import WebNotes
from .fetch_fields import SUMMARY_NAMESPACE, fetch_result
from .fetch_many import board_lines, post
from .filekeys import NAMESPACE as FILE_KEYS
from .filekeys import file_key
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


def likely_hit(task: Task, services: PagesServices) -> bool:
    """Whether the memory tier holds a snapshot of the URL ``task`` names (inline or its one
    URL field): a cheap guess, asked before the frame's turn, that ``answer_hit`` answers."""
    url = task.inline if task.inline is not None else task.get("URL")
    if url is None:
        return False
    try:
        key = normalise_url(url, services)
    except OpError:
        return False  # refused by the gate: the task answers it
    return services.cache.peek(CACHE_NAMESPACE, key) is not None


def answer_hit(params: Params, ctx: OpContext, services: PagesServices) -> Result | None:
    """``fetch``'s result for ``params`` when its one URL is answered from the memory tier
    as it would be by the task (see the module), else None, having changed nothing."""
    if not _plain(params, services):
        return None
    url = params.texts("URL")[0]
    page = _held_page(params, services, url)
    if page is None:
        return None
    try:
        content = page_view(page, params.text("EXTRACT"), url)
    except OpError:
        return None  # the task answers unsupported_content
    start, max_chars = params.integer("START"), _max_chars(params, services)
    key = file_key(page)
    summary = _held_summary(services, page, key, content, (start, max_chars), params)
    if summary is None:
        return None
    return _answer(params, ctx, services, page, content, key, summary)


def _answer(
    params: Params,
    ctx: OpContext,
    services: PagesServices,
    page: Page,
    content: str,
    key: str,
    summary: list[Field],
) -> Result:
    """What ``fetch`` does once its page is loaded, every step of it that cannot wait."""
    part = (params.integer("START"), _max_chars(params, services))
    services.cache.count_hit(CACHE_NAMESPACE)
    if sum(part) < len(content):  # its SUMMARY was read from the cache
        services.cache.count_hit(SUMMARY_NAMESPACE)
    services.board.turn(ctx.peer, services.config.docs.board)
    post(ctx, services, page, key)
    result = fetch_result(page, content, part, key, summary)
    if params.flag("BOARD"):
        result = dataclasses.replace(result, fields=(*result.fields, *board_lines(ctx, services)))
    notes = WebNotes(params.texts("URL")[0])
    notes.cache_hit = True
    return notes.attach(result)


def _plain(params: Params, services: PagesServices) -> bool:
    """Whether ``params`` ask one URL of the cache, with fields fetch accepts, of a daemon
    that reads its own cache first (no Firecrawl first)."""
    limits = services.config.fetch
    max_pages = params.opt_integer("MAX_PAGES")
    return (
        len(params.texts("URL")) == 1
        and params.opt_text("FILE_KEY") is None
        and not params.flag("NO_CACHE")
        and _max_chars(params, services) <= limits.max_chars_cap
        and (max_pages is None or max_pages <= limits.max_pages_cap)
        and _mode(params, services) != "always"
        and plan(services)[0][0].loader == "direct"
    )


def _mode(params: Params, services: PagesServices) -> str:
    render = params.opt_text("RENDER")
    return render if render is not None else services.config.fetch.render


def _max_chars(params: Params, services: PagesServices) -> int:
    return params.opt_integer("MAX_CHARS") or services.config.fetch.default_max_chars


def _held_page(params: Params, services: PagesServices, url: str) -> Page | None:
    """The snapshot ``load_page`` would read first for ``url`` (fresh enough for MAX_AGE,
    read with enough of a document's pages), when the memory tier holds it and it would
    not be rendered; else None."""
    try:
        key = normalise_url(url, services)
    except OpError:
        return None
    pages = params.opt_integer("MAX_PAGES") or services.config.fetch.max_pages
    snapshot = from_snapshot(services.cache.peek(CACHE_NAMESPACE, key))
    page = within_pages(fresh(snapshot, params.opt_integer("MAX_AGE")), pages)
    if page is None or (page.kind == "html" and page.shell is not None):
        return None  # an app shell: rendered, or marked as not, by the task (rendering.py)
    return page


def _held_summary(
    services: PagesServices,
    page: Page,
    key: str,
    content: str,
    part: tuple[int, int],
    params: Params,
) -> list[Field] | None:
    """The SUMMARY lines fetch adds for ``part`` of ``content`` ([] when it is not cut),
    when ``page``'s fileKey ``key`` needs no write and they are in memory; else None."""
    start, max_chars = part
    ttl_s = services.config.cache.fetch_ttl_s
    if start > len(content) or not services.cache.holds(
        FILE_KEYS, key, to_snapshot(page), ttl_s=ttl_s
    ):
        return None
    if start + max_chars >= len(content):
        return []
    bullets = services.cache.peek(SUMMARY_NAMESPACE, f"{key}:{params.text('EXTRACT')}")
    if not (isinstance(bullets, list) and all(isinstance(bullet, str) for bullet in bullets)):
        return None
    return [("SUMMARY", bullet) for bullet in bullets]
