"""The ``node`` op (IN:TOOL, OUT:NODE_RESULT): run an action on a paired node; and ``nodes``
(IN:SYS, OUT:NODES): list, approve, revoke (protocol/NODES.md N-8, N-14).

Handlers take their ``NodeServices`` as an argument (the composition plan's typed services);
the ``Op`` entries adapt them to today's two-argument handlers in one place.
"""

from __future__ import annotations

import json
import time

from csp_web.core.context import OpContext
from csp_web.core.errors import OpError
from csp_web.core.fields import FieldSpec, Params
from csp_web.core.ops import Op
from csp_web.core.replies import Result
from protocol import ErrorCode

from .services import NodeServices
from .wire import ACTIONS, NAME, RESULT

MAX_PARAMS_CHARS = 8192
_ACTION_PARAMS = {
    "camera_snap": {"facing", "quality"},
    "screen_record": {"duration_s", "format"},
    "location_get": set(),
    "notify": {"title", "body", "urgency"},
    "canvas": None,  # the browser issue defines its params; passed through as a JSON object
}


def _params(params: Params, action: str) -> dict[str, object]:
    value = params.json("PARAMS")
    value = {} if value is None else value
    if not isinstance(value, dict):
        raise OpError(ErrorCode.INVALID_FIELD, "PARAMS must be a JSON object")
    if len(json.dumps(value)) > MAX_PARAMS_CHARS:
        raise OpError(ErrorCode.INVALID_FIELD, f"PARAMS over {MAX_PARAMS_CHARS} chars")
    allowed = _ACTION_PARAMS[action]
    unknown = sorted(set(value) - allowed) if allowed is not None else []
    if unknown:
        raise OpError(ErrorCode.INVALID_FIELD, f"{action} takes no PARAMS key {unknown[0]}")
    return value


async def run_node(params: Params, ctx: OpContext, services: NodeServices) -> Result:
    action, name = params.text("ACTION"), params.text("NODE")
    if not NAME.fullmatch(name):
        raise OpError(ErrorCode.NODE_UNKNOWN, name[:64], scope=("node",))
    body = _params(params, action)
    ctx.audit.update(node=name, action=action)
    started = time.monotonic()
    outcome = await services.hub.run(name, action, body, ctx.task_id)
    elapsed_ms = round((time.monotonic() - started) * 1000)
    checked = outcome.checked
    ctx.audit.update(media=outcome.media_path, media_bytes=outcome.media_bytes)
    data = f"media:{outcome.media_path}" if outcome.media_path else checked.data
    fields = [("NODE", name), ("EXEC_TIME", str(elapsed_ms)), *checked.fields]
    if checked.work_ms is not None:
        fields.append(("NODE_TIME", checked.work_ms))
    if checked.media is not None:
        fields.append(("MEDIA_SHA256", checked.media.sha256))
    return Result(data, ("node",), tuple(fields))


async def manage_nodes(params: Params, ctx: OpContext, services: NodeServices) -> Result:
    action = params.text("ACTION")
    hub = services.hub
    if action == "list":
        entries = await hub.listing()
        fields = [("NODE", json.dumps(e, separators=(",", ":"))) for e in entries]
        if hub.tls_address is not None:
            fields.append(("TLS", f"{hub.tls_address} sha256:{hub.fingerprint}"))
        return Result(f"nodes:{len(entries)}", ("node",), tuple(fields))
    if action == "approve":
        code = params.opt_text("CODE")
        if code is None:
            raise OpError(ErrorCode.MISSING_FIELD, "CODE (approve)")
        name = await hub.approve(code)
        ctx.audit.update(approved=name)
        return Result(f"approved:{name}", ("node",), (("NODE", name),))
    revoked = params.opt_text("NAME")
    if revoked is None:
        raise OpError(ErrorCode.MISSING_FIELD, "NAME (revoke)")
    await hub.revoke(revoked)
    ctx.audit.update(revoked=revoked)
    return Result(f"revoked:{revoked}", ("node",), (("NODE", revoked),))


OPS: list[Op[NodeServices]] = [
    Op(
        "node",
        "TOOL",
        RESULT,
        "tool",
        run_node,
        (
            FieldSpec("ACTION", "choice", required=True, choices=ACTIONS),
            FieldSpec("NODE", required=True, max_chars=64, doc="a paired node's name"),
            FieldSpec("PARAMS", "json", max_chars=MAX_PARAMS_CHARS, doc="the action's options"),
        ),
        doc="run camera_snap, screen_record, location_get, notify or canvas on a paired node",
    ),
    # Audited like a tool op (pool "tool"): pairing and revoking are operator acts on record.
    Op(
        "nodes",
        "SYS",
        "NODES",
        "tool",
        manage_nodes,
        (
            FieldSpec("ACTION", "choice", default="list", choices=("list", "approve", "revoke")),
            FieldSpec("CODE", max_chars=16, doc="the pairing code (approve)"),
            FieldSpec("NAME", max_chars=64, doc="the node (revoke)"),
        ),
        doc="paired nodes: list them, approve a pairing code, revoke a node",
    ),
]
