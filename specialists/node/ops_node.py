"""The ``node`` op (IN:TOOL, OUT:NODE_RESULT): run an action on a paired node; and ``nodes``
(IN:SYS, OUT:NODES): list, approve, revoke (protocol/NODES.md N-8, N-14).

Handlers take their ``NodeServices`` as an argument (the composition plan's typed services);
the ``Op`` entries adapt them to today's two-argument handlers in one place.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from csp_web.core.api.audit import OpAudit
from csp_web.core.api.context import OpContext
from csp_web.core.api.errors import OpError, audit_failures
from csp_web.core.api.fields import Example, FieldSpec, Params, ReplyField
from csp_web.core.api.ops import Effects, Op
from csp_web.core.api.replies import Result
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


@dataclass(frozen=True)
class NodeAudit(OpAudit):
    """What a node op adds to its audit record; ``media`` the saved file's path, never its
    bytes."""

    node: str
    action: str
    media: str | None = None
    media_bytes: int | None = None


@dataclass(frozen=True)
class NodesAudit(OpAudit):
    """What managing nodes adds to its audit record: the node approved or revoked."""

    approved: str | None = None
    revoked: str | None = None


async def run_node(params: Params, ctx: OpContext, services: NodeServices) -> Result:
    action, name = params.text("ACTION"), params.text("NODE")
    if not NAME.fullmatch(name):
        raise OpError(ErrorCode.NODE_UNKNOWN, name[:64], scope=("node",))
    body = _params(params, action)
    started = time.monotonic()
    with audit_failures(NodeAudit(name, action)):
        outcome = await services.hub.run(name, action, body, ctx.task_id)
    elapsed_ms = round((time.monotonic() - started) * 1000)
    checked = outcome.checked
    audit = NodeAudit(name, action, outcome.media_path, outcome.media_bytes)
    data = f"media:{outcome.media_path}" if outcome.media_path else checked.data
    fields = [("NODE", name), ("EXEC_TIME", str(elapsed_ms)), *checked.fields]
    if checked.work_ms is not None:
        fields.append(("NODE_TIME", checked.work_ms))
    if checked.media is not None:
        fields.append(("MEDIA_SHA256", checked.media.sha256))
    return Result(data, ("node",), tuple(fields), audit=audit)


async def manage_nodes(params: Params, ctx: OpContext, services: NodeServices) -> Result:
    action = params.text("ACTION")
    hub = services.hub
    if action == "list":
        entries = await hub.listing()
        fields = [("NODE", json.dumps(e, separators=(",", ":"))) for e in entries]
        fields += [("PENDING", json.dumps(p, separators=(",", ":"))) for p in hub.pending_listing()]
        if hub.tls_address is not None:
            fields.append(("TLS", f"{hub.tls_address} sha256:{hub.fingerprint}"))
        return Result(f"nodes:{len(entries)}", ("node",), tuple(fields))
    if action == "approve":
        code = params.opt_text("CODE")
        if code is None:
            raise OpError(ErrorCode.MISSING_FIELD, "CODE (approve)")
        name = await hub.approve(code)
        audit = NodesAudit(approved=name)
        return Result(f"approved:{name}", ("node",), (("NODE", name),), audit=audit)
    revoked = params.opt_text("NAME")
    if revoked is None:
        raise OpError(ErrorCode.MISSING_FIELD, "NAME (revoke)")
    await hub.revoke(revoked)
    audit = NodesAudit(revoked=revoked)
    return Result(f"revoked:{revoked}", ("node",), (("NODE", revoked),), audit=audit)


NODE_REPLIES = (
    ReplyField("NODE", "always", "the node's name"),
    ReplyField("EXEC_TIME", "always", "ms from sending to the node's reply", kind="int"),
    ReplyField("NODE_TIME", "the node reported it", "ms the node worked (its WORK_MS)", kind="int"),
    ReplyField(
        "MEDIA_SHA256", "the reply carried media", "the sha256 of the media file DATA names"
    ),
    ReplyField("SOURCE", "location_get", "geoclue or fixed"),
    ReplyField("ACCURACY_M", "location_get, when known", "metres", kind="number"),
)

NODE_EXAMPLE = Example(
    ("TASK REQ:node IN:TOOL OUT:NODE_RESULT\nID 1\nACTION location_get\nNODE lab1\n"),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE [node]\n"
        "DATA lat:53.5,lon:8.1\n"
        "NODE lab1\n"
        "EXEC_TIME 0\n"
        "SOURCE fixed\n"
        "ACCURACY_M 10\n"
        "NODE_TIME 0\n"
    ),
)

NODES_REPLIES = (
    ReplyField(
        "NODE",
        "list: one per paired node; approve, revoke: always",
        "list: the node as JSON; approve, revoke: its name",
        repeat=True,
    ),
    ReplyField(
        "PENDING",
        "list: one per pairing waiting at this daemon",
        "the pairing as JSON: code, name, platform, source, expires_in_s",
        repeat=True,
    ),
    ReplyField(
        "TLS", "list, when the TLS listener is on", "<address> sha256:<certificate fingerprint>"
    ),
)
NODES_EXAMPLE = Example(
    ("TASK REQ:nodes IN:SYS OUT:NODES\nID 1\nACTION list\n"),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE [node]\n"
        "DATA nodes:1\n"
        'NODE {"name":"lab1","platform":"Linux/test","capabilities":["location_ge'
        't"],"connected":true,"last_seen":null,"paired_at":0}\n'
    ),
)


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
        replies=NODE_REPLIES,
        example=NODE_EXAMPLE,
        doc="run camera_snap, screen_record, location_get, notify or canvas on a paired node",
        # Notify and canvas show things on the node; nothing is deleted.
        effects=Effects(destructive=False),
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
        replies=NODES_REPLIES,
        example=NODES_EXAMPLE,
        doc="paired nodes: list them, approve a pairing code, revoke a node",
        # Revoke unpairs a node; approving a code twice fails the second time.
        effects=Effects(open_world=False),
    ),
]
