"""The MCP face types exec's NETWORK_REFUSED (specialists/tool/exec/_network.py) as the op
table declares it: an array of strings, even when one refusal came."""

from __future__ import annotations

from csp_web.core.daemon.compose import op_table
from csp_web.mcp_face.results import structured_fields
from csp_web.mcp_face.tools import reply_shape, tool_spec
from protocol import Reply, Status
from specialists.tool import TOOL

MAX_MS = 600_000


def _exec_entry() -> dict[str, object]:
    (found,) = [op.describe() for op in op_table((TOOL,)) if op.req == "exec"]
    return found


def test_execs_output_schema_lists_network_refused_as_an_array() -> None:
    schema = tool_spec(_exec_entry(), max_timeout_ms=MAX_MS).output_schema
    assert schema is not None
    refused = schema["properties"]["NETWORK_REFUSED"]
    assert (refused["type"], refused["items"]) == ("array", {"type": "string"})


def test_one_refusal_reaches_an_mcp_client_as_a_list() -> None:
    entry = _exec_entry()
    replies = entry["replies"]
    assert isinstance(replies, list)
    shapes = {field["name"]: reply_shape(field) for field in replies}
    reply = Reply(
        Status.OK,
        (
            ("DATA", "exit:0"),
            ("NETWORK_REFUSED", "other.example:443 url_rejected:not-in-network-rule"),
        ),
    )
    assert structured_fields(reply, shapes)["NETWORK_REFUSED"] == [
        "other.example:443 url_rejected:not-in-network-rule"
    ]
