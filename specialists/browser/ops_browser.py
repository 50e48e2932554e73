"""The ``browser`` op (IN:TOOL, OUT:BROWSER_RESULT): drive a real Chromium page.

    TASK REQ:browser IN:TOOL OUT:BROWSER_RESULT
    ACTION navigate|click|type|screenshot|extract|close|snapshot  (and actions_page's: press,
           hover, select, check, uncheck, scroll, wait, back, forward, reload, dialog, tabs,
           switch, close_tab, upload, pdf)
    TARGET_URL https://example.com
    SELECTOR css:.class|xpath://div
    REF e12                   (an element by its ref from snapshot, instead of SELECTOR)
    VALUE <text_to_type>
    SESSION <name>            (optional: a page kept between tasks)

Without SESSION the action runs on a fresh page closed after it. Every request the page makes
goes through the guard proxy (``csp_web.net.guard_proxy``). Each action's audit record
(``BrowserAudit``) names the URL, action, session and selector, the screenshot's file, and
VALUE only when SECRET is false.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import trio

from csp_web.core.api import extras
from csp_web.core.api.audit import OpAudit
from csp_web.core.api.context import OpContext
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import Example, FieldSpec, Params, ReplyField
from csp_web.core.api.ops import Op
from csp_web.core.api.replies import Result
from csp_web.net import check_url
from protocol import ErrorCode, Field
from specialists.browser.config import browser_section
from specialists.extract import extract_article

from . import actions_page, actions_snapshot, actions_state, downloads
from . import pages as page_ops
from .errors import translate
from .pages import PageSet
from .services import BrowserServices
from .sessions import SESSION_NAME, owner_of
from .steps import SCOPE as _SCOPE
from .steps import (
    Handlers,
    check_landing,
    element_target,
    on_pages,
    optional_target,
    require_field,
    timeout_ms,
)


async def _navigate(services: BrowserServices, ctx: OpContext, params: Params) -> Result:
    url = check_url(require_field(params, "TARGET_URL"), services.guard()).url
    engine = services.engine

    async def step(pages: PageSet) -> page_ops.Navigated:
        return await engine.run(page_ops.navigate, pages, url, timeout_ms())

    done = await on_pages(services, ctx, params.opt_text("SESSION"), step, url)
    check_landing(done.url, services)
    fields = [("URL", done.url), ("TITLE", done.title)]
    if done.status is not None:
        fields.append(("HTTP_STATUS", str(done.status)))
    return Result(f"action:navigate,url:{done.url}", _SCOPE, tuple(fields))


async def _click_or_type(
    services: BrowserServices, ctx: OpContext, params: Params, action: str
) -> Result:
    target = element_target(params)
    engine = services.engine
    if action == "click":

        async def step(pages: PageSet) -> str:
            return await engine.run(page_ops.click, pages, target, timeout_ms())

    else:
        value = require_field(params, "VALUE")

        async def step(pages: PageSet) -> str:
            return await engine.run(page_ops.type_text, pages, target, value, timeout_ms())

    url = await on_pages(services, ctx, params.opt_text("SESSION"), step)
    check_landing(url, services)  # a click may follow a link anywhere the page points
    return Result(f"action:{action},url:{url}", _SCOPE, (("URL", url), *target.fields()))


async def _extract(services: BrowserServices, ctx: OpContext, params: Params) -> Result:
    target = optional_target(params)
    attribute = params.opt_text("ATTRIBUTE")
    engine = services.engine

    async def step(pages: PageSet) -> page_ops.Extracted:
        return await engine.run(page_ops.extract, pages, target, attribute, timeout_ms())

    got = await on_pages(services, ctx, params.opt_text("SESSION"), step)
    if got.html is not None:
        article = await trio.to_thread.run_sync(
            lambda: extract_article(got.html or "", url=got.url)
        )
        content = article.markdown
    else:
        content = got.text or ""
    limit = params.opt_integer("MAX_CHARS") or browser_section(ctx.config).max_extract_chars
    fields = [("URL", got.url), ("TITLE", got.title), ("CONTENT", content[:limit])]
    if len(content) > limit:
        fields.append(("REMAINING_CHARS", str(len(content) - limit)))
    return Result(f"action:extract,url:{got.url}", _SCOPE, tuple(fields))


async def _close(services: BrowserServices, ctx: OpContext, params: Params) -> Result:
    name = require_field(params, "SESSION")
    owner = owner_of(ctx.peer.uid, ctx.peer.connection)
    if not await services.sessions.close(name, owner):
        raise OpError(ErrorCode.SESSION_NOT_FOUND, name, scope=_SCOPE)
    return Result("action:close", _SCOPE, ())  # SESSION: added to every session's reply


async def _click(services: BrowserServices, ctx: OpContext, params: Params) -> Result:
    return await _click_or_type(services, ctx, params, "click")


async def _type(services: BrowserServices, ctx: OpContext, params: Params) -> Result:
    return await _click_or_type(services, ctx, params, "type")


HANDLERS: Handlers = {
    "navigate": _navigate,
    "click": _click,
    "type": _type,
    "extract": _extract,
    "close": _close,
    **actions_snapshot.HANDLERS,
    **actions_page.HANDLERS,
    **actions_state.HANDLERS,
}


@dataclass(frozen=True)
class BrowserAudit(OpAudit):
    """What a browser action adds to its audit record. ``value`` is VALUE as typed, or
    ``<secret>`` when SECRET is set; ``screenshot`` the saved PNG's path, never its bytes;
    ``state`` the NAME or STATE named, never the state itself; ``downloads`` the fileKeys
    of the downloads kept."""

    action: str
    url: str | None
    session: str | None
    selector: str | None
    value: str | None
    screenshot: str | None = None
    ref: str | None = None
    state: str | None = None
    downloads: tuple[str, ...] = ()


def _audit(
    params: Params, action: str, url: str | None, fields: dict[str, str], told: list[Field]
) -> BrowserAudit:
    value = params.opt_text("VALUE")
    if value is not None and params.flag("SECRET"):
        value = "<secret>"
    session, selector = params.opt_text("SESSION"), params.opt_text("SELECTOR")
    screenshot = fields.get("SCREENSHOT_REF")
    state = params.opt_text("NAME") or params.opt_text("STATE")
    kept = tuple(text.split(" ", 1)[0] for name, text in told if name == "DOWNLOAD")
    ref = params.opt_text("REF")
    return BrowserAudit(action, url, session, selector, value, screenshot, ref, state, kept)


async def browser(params: Params, ctx: OpContext, services: BrowserServices) -> Result:
    extras.require("browser", scope=_SCOPE)  # before translate, which loads Playwright
    action = params.text("ACTION")
    session = params.opt_text("SESSION")
    if session is not None and not SESSION_NAME.fullmatch(session):
        raise OpError(ErrorCode.INVALID_FIELD, "SESSION must be 1-64 of [A-Za-z0-9._-]")
    target = params.opt_text("TARGET_URL")
    started = time.monotonic()
    try:
        with downloads.telling() as told:
            await actions_state.restore(services, ctx, params)
            result = await HANDLERS[action](services, ctx, params)
    except Exception as exc:
        error = translate(exc, scope="browser", url=target)
        error.audit = _audit(params, action, target, {}, [])
        raise error from exc
    replied = dict(result.fields)
    audit = _audit(params, action, replied.get("URL", target), replied, told)
    elapsed = str(int((time.monotonic() - started) * 1000))
    fields = [*result.fields, *told, ("EXEC_TIME", elapsed)]
    if session is not None:
        fields.append(("SESSION", session))
    return replace(result, fields=tuple(fields), audit=audit)


BROWSER_REPLIES = (
    ReplyField("URL", "always but close", "the page's URL after the action"),
    ReplyField("TITLE", "navigate, extract, snapshot", "the page's title"),
    ReplyField("HTTP_STATUS", "navigate, when the page had one", "the HTTP status", kind="int"),
    ReplyField("SELECTOR", "click, type", "the element acted on"),
    ReplyField("SCREENSHOT_BYTES", "screenshot", "the PNG's size", kind="int"),
    ReplyField("SCREENSHOT_REF", "screenshot", "the PNG's path under the state dir"),
    ReplyField("CONTENT", "extract, snapshot", "the text, capped by MAX_CHARS"),
    ReplyField("REMAINING_CHARS", "extract, snapshot: when cut", "what was left out", kind="int"),
    ReplyField("EXEC_TIME", "always", "ms the action took", kind="int"),
    ReplyField("SESSION", "a SESSION was given (close: always)", "the session"),
    *actions_snapshot.REPLIES,
    *actions_page.REPLIES,
    *actions_state.REPLIES,
    *downloads.REPLIES,
)

BROWSER_EXAMPLE = Example(
    (
        "TASK REQ:browser IN:TOOL OUT:BROWSER_RESULT\n"
        "ID 1\n"
        "ACTION navigate\n"
        "TARGET_URL https://origin.test/tides\n"
    ),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE [browser]\n"
        "DATA action:navigate,url:https://origin.test/tides\n"
        "URL https://origin.test/tides\n"
        'TITLE "Tides"\n'
        "HTTP_STATUS 200\n"
        "EXEC_TIME 0\n"
    ),
)


OPS: list[Op[BrowserServices]] = [
    Op(
        "browser",
        "TOOL",
        "BROWSER_RESULT",
        "tool",
        browser,
        (
            FieldSpec("ACTION", "choice", required=True, choices=tuple(HANDLERS)),
            FieldSpec("TARGET_URL", max_chars=2048, doc="navigate: the page to load"),
            FieldSpec("SELECTOR", max_chars=1024, doc="css:<selector> or xpath:<expression>"),
            FieldSpec(
                "VALUE",
                max_chars=64 * 1024,
                doc="type: the text to fill in; select: an option's value or label;"
                " dialog: a prompt's answer",
            ),
            FieldSpec("SECRET", "bool", default=False, doc="VALUE is never logged"),
            FieldSpec("SESSION", max_chars=64, doc="a page kept between tasks; close ends it"),
            FieldSpec("FULL_PAGE", "bool", default=False, doc="screenshot: the whole page"),
            FieldSpec("ATTRIBUTE", max_chars=128, doc="extract: this attribute of SELECTOR"),
            FieldSpec(
                "MAX_CHARS", "int", minimum=1, maximum=1_000_000, doc="extract, snapshot: cap"
            ),
            *actions_snapshot.FIELDS,
            *actions_page.FIELDS,
            *actions_state.FIELDS,
        ),
        replies=BROWSER_REPLIES,
        example=BROWSER_EXAMPLE,
        doc=(
            "drive a Chromium page through the fetch guard: navigate, click, type, screenshot,"
            " extract (readable Markdown, or SELECTOR's text), snapshot (the accessibility"
            " tree with refs that REF takes), press, hover, select, check, scroll, wait, history,"
            " dialogs, tabs, upload, pdf; SESSION keeps the page"
        ),
    )
]
