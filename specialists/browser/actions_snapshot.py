"""The browser's snapshot actions: ``snapshot`` (the accessibility tree with refs) and
``screenshot`` (the page, one element by REF or SELECTOR, or the page with its refs drawn).

    ACTION snapshot [SELECTOR css:form | REF e12] [DEPTH 8] [START 0] [MAX_CHARS 40000]
    ACTION screenshot [FULL_PAGE true] [REF e12 | SELECTOR css:#x | LABELS true]

A snapshot's refs (``e12``) are what every element action takes as REF instead of SELECTOR;
which refs are live, and when they go stale, is ``refs``'s to say.
"""

from __future__ import annotations

from csp_web.core.api.context import OpContext
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import FieldSpec, Params, ReplyField, check_start
from csp_web.core.api.replies import Result
from protocol import ErrorCode, Field, Status
from specialists.browser.config import BrowserConfig, browser_section

from . import pages as page_ops
from . import snapshot as snap
from .pages import PageSet, Target
from .services import BrowserServices
from .snapshot_text import page_of
from .steps import SCOPE, Handlers, on_pages, optional_target, timeout_ms


async def _snapshot(services: BrowserServices, ctx: OpContext, params: Params) -> Result:
    config = browser_section(ctx.config)
    scope = optional_target(params)
    depth = _depth(params, config)
    max_chars = _max_chars(params, config)
    start = params.opt_integer("START") or 0
    engine = services.engine

    caps = _caps(config, depth)

    async def step(pages: PageSet) -> snap.Snapshot:
        return await engine.run(snap.take, pages, scope, caps, timeout_ms())

    taken = await on_pages(services, ctx, params.opt_text("SESSION"), step)
    return _snapshot_reply(taken, start, max_chars, config)


def _caps(config: BrowserConfig, depth: int) -> snap.Caps:
    return snap.Caps(depth, config.snapshot_max_refs, config.snapshot_max_elements)


def _depth(params: Params, config: BrowserConfig) -> int:
    depth = params.opt_integer("DEPTH")
    if depth is None:
        return config.snapshot_max_depth
    if depth > config.snapshot_max_depth:
        raise OpError(ErrorCode.INVALID_FIELD, f"DEPTH above {config.snapshot_max_depth}")
    return depth


def _max_chars(params: Params, config: BrowserConfig) -> int:
    max_chars = params.opt_integer("MAX_CHARS")
    if max_chars is None:
        return config.snapshot_max_chars
    if max_chars > config.snapshot_max_chars:
        raise OpError(ErrorCode.INVALID_FIELD, f"MAX_CHARS above {config.snapshot_max_chars}")
    return max_chars


def _snapshot_reply(
    taken: snap.Snapshot, start: int, max_chars: int, config: BrowserConfig
) -> Result:
    """OK with the text; PARTIAL with NEXT_START when more follows (as fetch), or with ERROR
    too_large when the ref cap cut the snapshot itself."""
    check_start(start, len(taken.text))
    text, next_start = page_of(taken.text, start, max_chars)
    fields: list[Field] = [
        ("URL", taken.url),
        ("TITLE", taken.title),
        ("REFS", str(taken.refs)),
        ("CONTENT", text),
    ]
    status, error = Status.OK, None
    if next_start is not None:
        status = Status.PARTIAL
        fields += [
            ("NEXT_START", str(next_start)),
            ("REMAINING_CHARS", str(len(taken.text) - next_start)),
        ]
    if taken.cut:
        status = Status.PARTIAL
        why = f"over {config.snapshot_max_refs} refs: scope it with SELECTOR, REF or DEPTH"
        error = (ErrorCode.TOO_LARGE, why)
    data = f"action:snapshot,url:{taken.url}"
    return Result(data, SCOPE, tuple(fields), status=status, error=error)


async def _screenshot(services: BrowserServices, ctx: OpContext, params: Params) -> Result:
    config = browser_section(ctx.config)
    full = params.flag("FULL_PAGE")
    labels = params.flag("LABELS")
    target = _shot_target(params, full=full, labels=labels)
    engine = services.engine

    async def step(pages: PageSet) -> tuple[bytes, str, int | None]:
        if labels:
            caps = _caps(config, config.snapshot_max_depth)
            data, drawn = await engine.run(
                snap.labelled_shot, pages, caps, full_page=full, timeout_ms=timeout_ms()
            )
            return data, str(pages.page.url), drawn
        if target is not None:
            data = await engine.run(snap.element_shot, pages, target, timeout_ms())
        else:
            data = await engine.run(
                page_ops.screenshot, pages, full_page=full, timeout_ms=timeout_ms()
            )
        return data, str(pages.page.url), None

    data, url, drawn = await on_pages(services, ctx, params.opt_text("SESSION"), step)
    if len(data) > config.max_screenshot_bytes:
        raise OpError(
            ErrorCode.TOO_LARGE, f"screenshot over {config.max_screenshot_bytes} bytes", scope=SCOPE
        )
    path = await services.media.save("screenshot", data)
    fields: list[Field] = [("URL", url)]
    if target is not None:
        fields += target.fields()
    if drawn is not None:
        fields.append(("LABELS", str(drawn)))
    fields += [("SCREENSHOT_BYTES", str(len(data))), ("SCREENSHOT_REF", path)]
    return Result(f"action:screenshot,url:{url}", SCOPE, tuple(fields))


def _shot_target(params: Params, *, full: bool, labels: bool) -> Target | None:
    """The element a screenshot shows (REF or SELECTOR), or None for the page; an element
    with FULL_PAGE or LABELS is invalid_field (each is about the whole page)."""
    target = optional_target(params)
    if target is not None and (full or labels):
        raise OpError(ErrorCode.INVALID_FIELD, "REF/SELECTOR: not with FULL_PAGE or LABELS")
    return target


HANDLERS: Handlers = {"snapshot": _snapshot, "screenshot": _screenshot}

FIELDS = (
    FieldSpec("REF", max_chars=16, doc="an element by its ref from snapshot (e12); not SELECTOR"),
    FieldSpec("DEPTH", "int", minimum=1, maximum=10_000, doc="snapshot: levels of the tree"),
    FieldSpec("START", "int", minimum=0, maximum=100_000_000, doc="snapshot: char offset"),
    FieldSpec("LABELS", "bool", default=False, doc="screenshot: refs drawn on the image"),
)

REPLIES = (
    ReplyField("REF", "an element action given REF", "the element acted on"),
    ReplyField(
        "REFS",
        "snapshot",
        "the refs the snapshot carries (live until the page changes)",
        kind="int",
    ),
    ReplyField(
        "NEXT_START", "snapshot, PARTIAL: more text follows", "START for the next part", kind="int"
    ),
    ReplyField("LABELS", "screenshot LABELS true", "how many refs are drawn", kind="int"),
)
