"""BUDGET and BUDGET_ID through the MCP face (SPEC D-3): tool arguments built from the op
table's frame fields, BUDGET_LEFT and budget_exhausted in the structured result."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from csp_web.core.daemon.compose import op_table
from csp_web.mcp_face.tools import tool_spec
from specialists.web import WEB

from .conftest import WAIT_S, WebDaemon, face_command, face_env


def test_every_tool_takes_a_budget_and_a_budget_id_from_the_frame_fields() -> None:
    (fetch,) = [op.describe() for op in op_table((WEB,)) if op.req == "fetch"]
    properties = tool_spec(fetch, max_timeout_ms=1000).input_schema["properties"]
    assert properties["budget"]["type"] == "string"
    assert properties["budget"]["maxLength"] == 256
    assert properties["budget_id"] == {
        "type": "string",
        "maxLength": 64,
        "description": "a budget tasks share: made by the first frame naming it with BUDGET,"
        " its uid's",
    }
    assert "id" not in properties  # the face's own, as TRACEPARENT
    assert "traceparent" not in properties


async def call(client: Client, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool("web_fetch", arguments)
    assert isinstance(result, CallToolResult)
    content: dict[str, Any] | None = result.structured_content
    assert content is not None
    return content


@pytest.mark.slow  # a child interpreter importing the MCP SDK: seconds
async def test_a_budget_given_to_a_tool_is_kept_and_its_left_is_in_the_result(
    web_daemon: WebDaemon,
) -> None:
    command, argv = face_command("--socket", web_daemon.socket_path)
    face = Client(StdioServerParameters(command=command, args=argv, env=face_env()))
    shared = {"budget_id": "face-run", "budget": "fetches:1"}
    with trio.fail_after(WAIT_S):
        async with face as client:
            first = await call(client, {"url": web_daemon.url(), **shared})
            second = await call(client, {"url": web_daemon.url(), "budget_id": "face-run"})
    assert (first["STATUS"], first["BUDGET_LEFT"]) == ("OK", "fetches:0")
    assert (second["STATUS"], second["ERROR"], second["BUDGET_LEFT"]) == (
        "PARTIAL",
        "budget_exhausted:fetches",
        "fetches:0",
    )
