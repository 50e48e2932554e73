"""verify and summarize's quotes (issue 29) over the real Unix socket and through the MCP face
(stdio): the verify tool is built from the op table with typed fields, and a call through the
face answers what the socket answers."""

from __future__ import annotations

import pytest
import trio
from mcp import Client, StdioServerParameters

from csp_web.client.trio_client import open_client
from csp_web.core.daemon.compose import op_table
from csp_web.mcp_face.tools import tool_spec
from protocol import Status, Task
from specialists.tool import TOOL
from specialists.web import WEB

from .conftest import WAIT_S, WebDaemon, face_command, face_env

FIRST = "The North Sea has two high tides every day."
QUOTES = [FIRST, "two high tides every day.", "The moon is made of cheese"]


def test_the_verify_tool_takes_repeated_quotes_and_answers_typed_counts() -> None:
    (entry,) = [op.describe() for op in op_table((WEB, TOOL)) if op.req == "verify"]
    spec = tool_spec(entry, max_timeout_ms=600_000)
    inputs = spec.input_schema["properties"]
    assert (inputs["quote"]["type"], inputs["quotes"]["type"]) == ("string", "array")
    assert (inputs["file_key"]["type"], inputs["url"]["type"]) == ("string", "string")
    assert spec.output_schema is not None
    outputs = spec.output_schema["properties"]
    assert outputs["QUOTE"]["type"] == "array"
    assert {outputs[n]["type"] for n in ("FOUND", "MOVED", "NOT_FOUND")} == {"integer"}


async def test_verify_over_the_socket_finds_moves_and_misses(web_daemon: WebDaemon) -> None:
    fields = (("URL", web_daemon.url()), *(("QUOTE", q) for q in QUOTES))
    with trio.fail_after(WAIT_S):
        async with open_client(web_daemon.socket_path) as client:
            reply = await client.call(Task("verify", "WEB", "VERIFY", None, fields))
    assert reply.status is Status.OK
    answers = reply.get_all("QUOTE")
    assert [a.split()[:2] for a in answers] == [["1", "found"], ["2", "found"], ["3", "not_found"]]
    assert (reply.get("FOUND"), reply.get("NOT_FOUND")) == ("2", "1")


@pytest.mark.slow  # a child interpreter importing the MCP SDK: seconds
async def test_verify_and_summarize_quotes_through_the_mcp_face(web_daemon: WebDaemon) -> None:
    command, argv = face_command("--socket", web_daemon.socket_path)
    params = StdioServerParameters(command=command, args=argv, env=face_env())
    with trio.fail_after(WAIT_S):
        async with Client(params) as client:
            checked = await client.call_tool(
                "web_verify", {"url": web_daemon.url(), "quotes": QUOTES}
            )
            summary = await client.call_tool(
                "web_summarize", {"url": web_daemon.url(), "max_bullets": 1, "verify": "strict"}
            )
    assert not checked.is_error
    assert checked.structured_content is not None
    got = checked.structured_content
    assert (got["FOUND"], got["MOVED"], got["NOT_FOUND"]) == (2, 0, 1)
    assert [q.split()[1] for q in got["QUOTE"]] == ["found", "found", "not_found"]
    assert got["FILE_KEY"].startswith("fk_")
    assert not summary.is_error
    assert summary.structured_content is not None
    bullets = summary.structured_content
    assert (bullets["VERIFIED"], bullets["UNVERIFIED_COUNT"]) == (1, 0)
    assert bullets["QUOTE"][0].startswith(f"1 {got['FILE_KEY']} @")
