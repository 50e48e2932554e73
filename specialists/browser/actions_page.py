"""The actions sites need, as ``browser`` op handlers: press, hover, select, check, uncheck,
scroll, wait, back, forward, reload, dialog, tabs, switch, close_tab, upload and pdf.

Each handler reaches its page through ``on_pages`` and an element through ``element_target``
(the engine-thread side is ``page_actions``); every URL an action ends on is checked by the
guard's gate as navigate's is (``check_landing``). Actions that only mean something on a
kept page (tabs, switch, close_tab, dialog, back, forward) need SESSION. ``ops_browser``
joins ``HANDLERS``, ``FIELDS`` and ``REPLIES`` into the one ``browser`` op.
"""

from __future__ import annotations

import json
import mimetypes
import os
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import trio

from csp_web.config import masked_paths, workspace_roots
from csp_web.core.api.context import OpContext
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import FieldSpec, Params, ReplyField
from csp_web.core.api.replies import Result
from protocol import ErrorCode
from specialists.browser.config import browser_section

from . import page_actions as act
from .keys import MAX_KEY_CHARS, check_key
from .pages import DialogAnswer, Navigated, PageSet
from .services import BrowserServices
from .steps import SCOPE, Handlers, check_landing, element_target, on_pages, require_field
from .steps import timeout_ms as left_ms
from .workspace_files import read_workspace_file, reader_of

T = TypeVar("T")
MAX_PIXELS = 100_000  # a scroll of ~140 viewports: past any page a human reads, one call
MAX_WAIT_MS = 120_000  # two minutes; the task's deadline bounds it further
MAX_TAB = 63  # a field bound only: the session's page cap (max_pages_per_session) is the real one
_WAIT_FOR = ("TEXT", "SELECTOR", "REF", "URL", "WAIT_MS")
_ELEMENT = ("SELECTOR", "REF")


def _session(params: Params, action: str) -> str:
    """SESSION, which ``action`` needs (a fresh page has no history, tabs or dialogs)."""
    session = params.opt_text("SESSION")
    if session is None:
        raise OpError(ErrorCode.MISSING_FIELD, f"SESSION ({action} acts on a kept page)")
    return session


def _names_element(params: Params) -> bool:
    return any(params.opt_text(name) is not None for name in _ELEMENT)


async def _run(
    services: BrowserServices,
    ctx: OpContext,
    params: Params,
    fn: Callable[..., Coroutine[Any, Any, T]],
    *args: object,
    session: str | None = None,
) -> T:
    """``fn(pages, *args)`` on the engine thread, on the session's page or a fresh one."""
    engine = services.engine

    async def step(pages: PageSet) -> T:
        return await engine.run(fn, pages, *args)

    return await on_pages(services, ctx, session or params.opt_text("SESSION"), step)


def _landed(services: BrowserServices, action: str, url: str, *fields: tuple[str, str]) -> Result:
    check_landing(url, services)
    return Result(f"action:{action},url:{url}", SCOPE, (("URL", url), *fields))


async def _press(services: BrowserServices, ctx: OpContext, params: Params) -> Result:
    key = check_key(require_field(params, "KEY"))
    target = element_target(params) if _names_element(params) else None
    url = await _run(services, ctx, params, act.press, target, key, left_ms())
    return _landed(services, "press", url, *(target.fields() if target else ()))


def _element_action(
    name: str, fn: Callable[..., Coroutine[Any, Any, str]], *extra: Callable[[Params], object]
) -> Callable[[BrowserServices, OpContext, Params], Awaitable[Result]]:
    """A handler acting on the element SELECTOR/REF names, with ``extra``'s values."""

    async def handler(services: BrowserServices, ctx: OpContext, params: Params) -> Result:
        target = element_target(params)
        values = [read(params) for read in extra]
        url = await _run(services, ctx, params, fn, target, *values, left_ms())
        return _landed(services, name, url, *target.fields())

    return handler


async def _scroll(services: BrowserServices, ctx: OpContext, params: Params) -> Result:
    pixels = params.opt_integer("PIXELS")
    if _names_element(params) == (pixels is not None):
        raise OpError(ErrorCode.INVALID_FIELD, "scroll takes SELECTOR/REF or PIXELS, one")
    target = element_target(params) if pixels is None else None
    if target is not None:
        done = await _run(services, ctx, params, act.scroll_into_view, target, left_ms())
    else:
        done = await _run(services, ctx, params, act.scroll_by, pixels)
    fields = target.fields() if target else ()
    return _landed(services, "scroll", done.url, *fields, ("SCROLL_Y", str(done.y)))


async def _wait(services: BrowserServices, ctx: OpContext, params: Params) -> Result:
    given = [name for name in _WAIT_FOR if name in params]
    if not given:
        raise OpError(ErrorCode.MISSING_FIELD, "TEXT, SELECTOR, REF, URL or WAIT_MS")
    if len(given) > 1:
        raise OpError(ErrorCode.INVALID_FIELD, f"wait takes one of {', '.join(_WAIT_FOR)}")
    if given[0] == "WAIT_MS":
        url = await _sleep(services, ctx, params, params.integer("WAIT_MS"))
    elif given[0] == "TEXT":
        url = await _run(services, ctx, params, act.wait_text, params.text("TEXT"), left_ms())
    elif given[0] == "URL":
        url = await _run(services, ctx, params, act.wait_url, params.text("URL"), left_ms())
    else:
        target = element_target(params)
        url = await _run(services, ctx, params, act.wait_element, target, left_ms())
    return _landed(services, "wait", url)


async def _sleep(services: BrowserServices, ctx: OpContext, params: Params, wait_ms: int) -> str:
    """Hold the page ``wait_ms``; past what the task's deadline leaves, wait_timeout at
    once (a wait that cannot end in time is not started)."""
    if wait_ms > left_ms():
        raise OpError(
            ErrorCode.WAIT_TIMEOUT, f"WAIT_MS {wait_ms} passes the task's deadline", scope=SCOPE
        )

    async def step(pages: PageSet) -> str:
        await trio.sleep(wait_ms / 1000)
        return str(pages.page.url)

    return await on_pages(services, ctx, params.opt_text("SESSION"), step)


def _history(which: str) -> Callable[[BrowserServices, OpContext, Params], Awaitable[Result]]:
    async def handler(services: BrowserServices, ctx: OpContext, params: Params) -> Result:
        session = params.opt_text("SESSION") if which == "reload" else _session(params, which)
        done: Navigated = await _run(
            services, ctx, params, act.history, which, left_ms(), session=session
        )
        fields = [("TITLE", done.title)]
        if done.status is not None:
            fields.append(("HTTP_STATUS", str(done.status)))
        return _landed(services, which, done.url, *fields)

    return handler


async def _dialog(services: BrowserServices, ctx: OpContext, params: Params) -> Result:
    session = _session(params, "dialog")
    if "ACCEPT" not in params:
        raise OpError(ErrorCode.MISSING_FIELD, "ACCEPT", scope=SCOPE)
    accept = params.flag("ACCEPT")
    answer = DialogAnswer(accept, params.opt_text("VALUE") if accept else None)
    url = await _run(services, ctx, params, act.arm_dialog, answer, session=session)
    return _landed(services, "dialog", url, ("DIALOG", "accept" if accept else "dismiss"))


def _tab_line(tab: act.Tab) -> tuple[str, str]:
    return ("TAB", f"{tab.index} {tab.url} {json.dumps(tab.title, ensure_ascii=False)}")


async def _tabs(services: BrowserServices, ctx: OpContext, params: Params) -> Result:
    session = _session(params, "tabs")
    found: list[act.Tab] = await _run(services, ctx, params, act.tabs, session=session)
    current = next(tab for tab in found if tab.current)
    fields = [("TABS", str(len(found))), ("CURRENT_TAB", str(current.index))]
    return _landed(services, "tabs", current.url, *fields, *map(_tab_line, found))


def _tab_action(name: str) -> Callable[[BrowserServices, OpContext, Params], Awaitable[Result]]:
    fn = act.switch if name == "switch" else act.close_tab

    async def handler(services: BrowserServices, ctx: OpContext, params: Params) -> Result:
        session = _session(params, name)
        if "TAB" not in params:
            raise OpError(ErrorCode.MISSING_FIELD, "TAB", scope=SCOPE)
        tab = await _run(services, ctx, params, fn, params.integer("TAB"), session=session)
        fields = (("TITLE", tab.title), ("CURRENT_TAB", str(tab.index)))
        return _landed(services, name, tab.url, *fields)

    return handler


async def _upload(services: BrowserServices, ctx: OpContext, params: Params) -> Result:
    target = element_target(params)
    name, mime, data = await _upload_file(services, ctx, params)
    url = await _run(services, ctx, params, act.upload, target, name, mime, data, left_ms())
    fields = (*target.fields(), ("UPLOAD_NAME", name), ("UPLOAD_BYTES", str(len(data))))
    return _landed(services, "upload", url, *fields)


async def _upload_file(
    services: BrowserServices, ctx: OpContext, params: Params
) -> tuple[str, str, bytes]:
    """(name, content type, bytes) of the file FILE_KEY or PATH names (exactly one)."""
    key, path = params.opt_text("FILE_KEY"), params.opt_text("PATH")
    if (key is None) == (path is None):
        raise OpError(ErrorCode.MISSING_FIELD, "FILE_KEY or PATH (one)", scope=SCOPE)
    cap = browser_section(ctx.config).max_upload_bytes
    if path is not None:
        roots, masked = workspace_roots(ctx.config), masked_paths(ctx.config)
        reader = reader_of(ctx.config)
        data = await trio.to_thread.run_sync(
            lambda: read_workspace_file(roots, path, max_bytes=cap, masked=masked, reader=reader)
        )
        name = os.path.basename(path)
        return name, mimetypes.guess_type(name)[0] or "application/octet-stream", data
    store = services.files.get()
    if store is None:
        raise OpError(ErrorCode.NOT_AVAILABLE, "upload FILE_KEY: no fileKey store", scope=SCOPE)
    stored = await store.get(key or "")
    if len(stored.body) > cap:
        detail = f"FILE_KEY over {cap} bytes (tool.browser.max_upload_bytes)"
        raise OpError(ErrorCode.TOO_LARGE, detail, scope=SCOPE)
    return stored.name or "upload", stored.content_type or "application/octet-stream", stored.body


async def _pdf(services: BrowserServices, ctx: OpContext, params: Params) -> Result:
    store = services.files.get()
    if store is None:
        raise OpError(ErrorCode.NOT_AVAILABLE, "pdf: no fileKey store", scope=SCOPE)
    data, url = await _run(services, ctx, params, act.pdf)
    check_landing(url, services)
    cap = browser_section(ctx.config).max_pdf_bytes
    if len(data) > cap:
        detail = f"PDF over {cap} bytes (tool.browser.max_pdf_bytes)"
        raise OpError(ErrorCode.TOO_LARGE, detail, scope=SCOPE)
    key = await store.put(data, url=url, name="page.pdf", content_type="application/pdf")
    return _landed(services, "pdf", url, ("FILE_KEY", key), ("PDF_BYTES", str(len(data))))


def _value(params: Params) -> str:
    return require_field(params, "VALUE")


HANDLERS: Handlers = {
    "press": _press,
    "hover": _element_action("hover", act.hover),
    "select": _element_action("select", act.select, _value),
    "check": _element_action("check", act.set_checked, lambda _params: True),
    "uncheck": _element_action("uncheck", act.set_checked, lambda _params: False),
    "scroll": _scroll,
    "wait": _wait,
    "back": _history("back"),
    "forward": _history("forward"),
    "reload": _history("reload"),
    "dialog": _dialog,
    "tabs": _tabs,
    "switch": _tab_action("switch"),
    "close_tab": _tab_action("close_tab"),
    "upload": _upload,
    "pdf": _pdf,
}

FIELDS = (
    FieldSpec("KEY", max_chars=MAX_KEY_CHARS, doc="press: a key or chord (Enter, Control+A)"),
    FieldSpec(
        "PIXELS",
        "int",
        minimum=-MAX_PIXELS,
        maximum=MAX_PIXELS,
        doc="scroll: pixels down (negative: up)",
    ),
    FieldSpec("TEXT", max_chars=1024, doc="wait: until this text shows"),
    FieldSpec("URL", max_chars=2048, doc="wait: until the URL matches (a glob, or exact)"),
    FieldSpec("WAIT_MS", "int", minimum=1, maximum=MAX_WAIT_MS, doc="wait: this long"),
    FieldSpec("ACCEPT", "bool", doc="dialog: accept (true) or dismiss (false) the next one"),
    FieldSpec("TAB", "int", minimum=0, maximum=MAX_TAB, doc="switch, close_tab: the tab's index"),
    FieldSpec("FILE_KEY", max_chars=64, doc="upload: a fileKey's file"),
    FieldSpec("PATH", max_chars=4096, doc="upload: a file under tool.exec.workspace_roots"),
)

REPLIES = (
    ReplyField("SCROLL_Y", "scroll", "the page's vertical scroll offset after it", kind="int"),
    ReplyField("DIALOG", "dialog", "accept or dismiss: how the next dialog will be answered"),
    ReplyField("TABS", "tabs", "how many tabs the session has open", kind="int"),
    ReplyField("CURRENT_TAB", "tabs, switch, close_tab", "the current tab's index", kind="int"),
    ReplyField("TAB", "tabs, one per tab", '<index> <url> "<title>"', repeat=True),
    ReplyField("UPLOAD_NAME", "upload", "the file name the page sees"),
    ReplyField("UPLOAD_BYTES", "upload", "the file's size", kind="int"),
    ReplyField("FILE_KEY", "pdf", "the PDF's fileKey (read it with fetch FILE_KEY)"),
    ReplyField("PDF_BYTES", "pdf", "the PDF's size", kind="int"),
)
