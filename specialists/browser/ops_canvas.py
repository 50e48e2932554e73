"""The ``canvas`` op (IN:TOOL, OUT:CANVAS_RESULT): what a node's screen shows.

    TASK REQ:canvas IN:TOOL OUT:CANVAS_RESULT
    ACTION present|hide|navigate|eval|snapshot
    URL https://dashboard.example.com      (or HTML <inline page> for present)
    WIDTH 1920
    HEIGHT 1080
    NODE main

Node ``main`` is this host's Chromium page (``canvas.LocalCanvas``); its requests pass the
same guard proxy as the browser's. ``eval`` is off unless ``tool.browser.canvas.allow_eval``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from csp_web.core.api import budget, extras
from csp_web.core.api.audit import OpAudit
from csp_web.core.api.context import OpContext
from csp_web.core.api.deadlines import work_seconds
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import Example, FieldSpec, Params, ReplyField
from csp_web.core.api.ops import Op
from csp_web.core.api.replies import Result
from csp_web.net import check_url
from protocol import ErrorCode

from .canvas import CanvasNode
from .config import browser_section
from .errors import translate
from .services import BrowserServices
from .sessions import owner_of

ACTIONS = ("present", "hide", "navigate", "eval", "snapshot")
_SCOPE = ("canvas",)


def _timeout_ms() -> float:
    return max(1.0, work_seconds(default_s=30.0) * 1000)


def _node(services: BrowserServices, name: str) -> CanvasNode:
    node = services.canvas.get(name)
    if node is None:
        raise OpError(ErrorCode.UNKNOWN_NODE, name, scope=_SCOPE)
    return node


def _url(services: BrowserServices, params: Params) -> str:
    url = params.opt_text("URL")
    if url is None:
        raise OpError(ErrorCode.MISSING_FIELD, "URL", scope=_SCOPE)
    return check_url(url, services.guard()).url


async def _present(
    services: BrowserServices, node: CanvasNode, params: Params, ctx: OpContext
) -> tuple[str, tuple[tuple[str, str], ...]]:
    html = params.opt_text("HTML")
    if (html is None) == (params.opt_text("URL") is None):
        raise OpError(ErrorCode.INVALID_FIELD, "present takes exactly one of URL or HTML")
    canvas = browser_section(ctx.config).canvas
    width = params.opt_integer("WIDTH") or canvas.width
    height = params.opt_integer("HEIGHT") or canvas.height
    url = None if html is not None else _url(services, params)
    shown = await node.present(
        url=url,
        html=html,
        width=width,
        height=height,
        timeout_ms=_timeout_ms(),
        script=canvas.allow_eval,  # inline HTML is caller script too: eval's rule holds
    )
    return shown, (("URL", shown), ("WIDTH", str(width)), ("HEIGHT", str(height)))


async def _act(
    services: BrowserServices, ctx: OpContext, params: Params, action: str, name: str
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The DATA's detail and the reply's fields; the node is held for ``ctx``'s peer
    (``CanvasClaims``: another peer's canvas in use is permission_denied)."""
    node = _node(services, name)
    owner = owner_of(ctx.peer.uid, ctx.peer.connection)
    idle_s = browser_section(ctx.config).canvas_idle_s
    anew = action in ("present", "hide")  # nothing to tell a client starting over
    async with services.canvas_claims.acting(name, node, owner, idle_s, anew=anew):
        return await _act_on(services, ctx, params, action, name, node)


async def _act_on(
    services: BrowserServices,
    ctx: OpContext,
    params: Params,
    action: str,
    name: str,
    node: CanvasNode,
) -> tuple[str, tuple[tuple[str, str], ...]]:
    if action == "present":
        shown, fields = await _present(services, node, params, ctx)
        return f"node:{name}", fields
    if action == "hide":
        await node.hide()
        return f"node:{name}", ()
    if action == "navigate":
        shown = await node.navigate(_url(services, params), _timeout_ms())
        return f"node:{name}", (("URL", shown),)
    if action == "eval":
        return await _eval(node, params, ctx, name)
    data = await node.snapshot(_timeout_ms())
    path = await services.media.save("canvas", data)
    return f"node:{name}", (("SNAPSHOT_BYTES", str(len(data))), ("SNAPSHOT_REF", path))


async def _eval(
    node: CanvasNode, params: Params, ctx: OpContext, name: str
) -> tuple[str, tuple[tuple[str, str], ...]]:
    canvas = browser_section(ctx.config).canvas
    if not canvas.allow_eval:
        raise OpError(ErrorCode.NOT_AVAILABLE, "canvas eval is off (canvas.allow_eval)")
    expression = params.opt_text("EXPRESSION")
    if expression is None:
        raise OpError(ErrorCode.MISSING_FIELD, "EXPRESSION", scope=_SCOPE)
    timeout_ms = min(float(canvas.eval_timeout_ms), _timeout_ms())
    value = await node.evaluate(expression, timeout_ms, canvas.max_eval_result_bytes)
    return f"node:{name}", (("RESULT", value),)


@dataclass(frozen=True)
class CanvasAudit(OpAudit):
    """What a canvas action adds to its audit record; ``snapshot`` the PNG's path, never its
    bytes."""

    action: str
    node: str
    url: str | None
    snapshot: str | None = None


async def canvas(params: Params, ctx: OpContext, services: BrowserServices) -> Result:
    extras.require("browser", scope=_SCOPE)  # before translate, which loads Playwright
    action = params.text("ACTION")
    name = params.text("NODE")
    audit = CanvasAudit(action, name, params.opt_text("URL"))
    started = time.monotonic()
    try:
        if action != "hide":  # each action is a browser action (SPEC D-3); hiding is free
            await budget.take("browser_actions")
        detail, fields = await _act(services, ctx, params, action, name)
    except Exception as exc:
        error = translate(exc, scope="canvas", url=params.opt_text("URL"))
        error.scope = error.scope or _SCOPE  # a node's own refusals name no scope
        error.audit = audit
        raise error from exc
    elapsed = str(int((time.monotonic() - started) * 1000))
    audit = replace(audit, snapshot=dict(fields).get("SNAPSHOT_REF"))
    fields = (*fields, ("EXEC_TIME", elapsed))
    return Result(f"action:{action},{detail}", _SCOPE, fields, audit=audit)


CANVAS_REPLIES = (
    ReplyField("URL", "present, navigate", "the page shown"),
    ReplyField("WIDTH", "present on main", "pixels", kind="int"),
    ReplyField("HEIGHT", "present on main", "pixels", kind="int"),
    ReplyField("SNAPSHOT_BYTES", "snapshot", "the PNG's size", kind="int"),
    ReplyField("SNAPSHOT_REF", "snapshot", "the PNG's path under the state dir"),
    ReplyField("RESULT", "eval", "the expression's value as JSON"),
    ReplyField("EXEC_TIME", "always", "ms the action took", kind="int"),
)

CANVAS_EXAMPLE = Example(
    (
        "TASK REQ:canvas IN:TOOL OUT:CANVAS_RESULT\n"
        "ID 1\n"
        "ACTION present\n"
        'HTML "<h1>High tide</h1>"\n'
        "WIDTH 640\n"
        "HEIGHT 360\n"
    ),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE [canvas]\n"
        "DATA action:present,node:main\n"
        "URL inline\n"
        "WIDTH 640\n"
        "HEIGHT 360\n"
        "EXEC_TIME 0\n"
    ),
)


OPS: list[Op[BrowserServices]] = [
    Op(
        "canvas",
        "TOOL",
        "CANVAS_RESULT",
        "tool",
        canvas,
        (
            FieldSpec("ACTION", "choice", required=True, choices=ACTIONS),
            FieldSpec("URL", max_chars=2048, doc="present, navigate: the page to show"),
            FieldSpec("HTML", max_chars=512 * 1024, doc="present: an inline page instead of URL"),
            FieldSpec("WIDTH", "int", minimum=64, maximum=7680, doc="present: pixels"),
            FieldSpec("HEIGHT", "int", minimum=64, maximum=4320, doc="present: pixels"),
            FieldSpec("NODE", default="main", max_chars=64, doc="the node whose canvas"),
            FieldSpec("EXPRESSION", max_chars=64 * 1024, doc="eval: JavaScript, JSON result"),
        ),
        replies=CANVAS_REPLIES,
        example=CANVAS_EXAMPLE,
        doc=(
            "show a page on a node's canvas (main: this host's Chromium): present, hide,"
            " navigate, eval (when allowed), snapshot"
        ),
    )
]
