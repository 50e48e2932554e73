"""Result rendering, PARAMS parsing and restart delays: pure functions, no server needed."""

from __future__ import annotations

import json

import pytest
from mcp.types import (
    BlobResourceContents,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from csp_web.core.api.errors import OpError
from protocol import ErrorCode, Reply, Status, serialize
from specialists.tool.mcp import McpResult, parse_params
from specialists.tool.mcp.backoff import Backoff
from specialists.tool.mcp.config import McpConfig
from specialists.tool.mcp.render import build_result

CONFIG = McpConfig()


def render(result: CallToolResult, config: McpConfig = CONFIG) -> McpResult:
    return build_result("srv", "tool", result, exec_time_ms=7, config=config)


def test_absent_params_mean_no_arguments() -> None:
    assert parse_params(None) == {}


def test_params_text_holding_a_json_object_parses_to_a_dict() -> None:
    assert parse_params('{"path": "src/index.ts", "n": [1, 2.5, null]}') == {
        "path": "src/index.ts",
        "n": [1, 2.5, None],
    }


@pytest.mark.parametrize(
    "text",
    ["", "[1, 2]", "3", '"path"', "null", "{bad json}", '{"a": NaN}', "Infinity", "[" * 100_000],
)
def test_params_text_that_is_not_one_json_object_raises_invalid_field(text: str) -> None:
    with pytest.raises(OpError) as failed:
        parse_params(text)
    assert (failed.value.code, failed.value.detail) == (ErrorCode.INVALID_FIELD, "PARAMS")


@pytest.mark.parametrize("text", ['{"a": "\\ud800"}', '{"\\udc00": 1}', '{"a": ["\\ud83dx"]}'])
def test_params_text_with_a_lone_surrogate_raises_invalid_field(text: str) -> None:
    """V-2: the arguments went to the MCP server with a character UTF-8 cannot carry."""
    with pytest.raises(OpError) as failed:
        parse_params(text)
    assert (failed.value.code, failed.value.detail) == (ErrorCode.INVALID_FIELD, "PARAMS")


def test_text_blocks_are_joined_by_newlines() -> None:
    result = render(CallToolResult(content=[TextContent(text="one"), TextContent(text="two")]))
    assert result.data == "one\ntwo"


def test_media_and_resources_become_short_notes_not_base64() -> None:
    blocks: list[ContentBlock] = [
        ImageContent(data="A" * 400, mime_type="image/png"),
        ResourceLink(name="r", uri="file:///tmp/a.txt"),
        EmbeddedResource(
            resource=TextResourceContents(uri="file:///tmp/b.txt", text="inline text")
        ),
        EmbeddedResource(
            resource=BlobResourceContents(uri="file:///tmp/c.bin", blob="QUJD", mime_type="x/y")
        ),
    ]
    data = render(CallToolResult(content=blocks)).data
    assert data.splitlines() == [
        "[image image/png 300 bytes]",
        "[resource_link file:///tmp/a.txt]",
        "inline text",
        "[resource file:///tmp/c.bin x/y 3 bytes]",
    ]


def test_structured_only_answer_fills_data_with_its_json() -> None:
    result = render(CallToolResult(content=[], structured_content={"b": 1, "a": [True]}))
    assert result.data == '{"a":[true],"b":1}'
    assert result.structured_json == '{"a":[true],"b":1}'


def test_lone_surrogates_are_replaced_so_the_reply_serializes() -> None:
    result = render(
        CallToolResult(
            content=[TextContent(text="bad \ud800 char")], structured_content={"k": "\udfff"}
        )
    )
    assert result.data == "bad \ufffd char"
    head = (("SCOPE", f"[{result.scope[0]}]"), ("DATA", result.data))
    wire = serialize(Reply(Status.OK, head + result.fields())).decode("utf-8")
    assert "DATA bad \ufffd char\n" in wire


def test_text_at_the_cap_is_whole_and_one_more_character_is_cut() -> None:
    config = McpConfig(max_text_chars=10)
    whole = render(CallToolResult(content=[TextContent(text="x" * 10)]), config)
    cut = render(CallToolResult(content=[TextContent(text="x" * 11)]), config)
    assert (whole.data, whole.truncated) == ("x" * 10, False)
    assert (len(cut.data), cut.truncated, cut.text_chars) == (10, True, 11)
    assert ("TEXT_CHARS", "11") in cut.fields()


def test_error_result_raises_mcp_tool_error_with_a_capped_summary() -> None:
    config = McpConfig(max_error_chars=20)
    with pytest.raises(OpError) as failed:
        render(CallToolResult(content=[TextContent(text="e" * 50)], is_error=True), config)
    error = failed.value
    assert (error.code, error.detail, error.scope) == (ErrorCode.MCP_TOOL_ERROR, "tool", ("srv",))
    summary = dict(error.fields)["ERROR_SUMMARY"]
    assert len(summary) == 20
    assert dict(error.fields)["EXEC_TIME"] == "7"


def test_structured_json_passing_its_cap_is_left_out_with_its_length() -> None:
    config = McpConfig(max_structured_chars=10)
    result = render(
        CallToolResult(content=[TextContent(text="t")], structured_content={"key": "long value"}),
        config,
    )
    fields = dict(result.fields())
    assert "STRUCTURED" not in fields
    assert fields["STRUCTURED_CHARS"] == str(
        len(json.dumps({"key": "long value"}, separators=(",", ":")))
    )


def test_backoff_doubles_up_to_its_cap() -> None:
    backoff = Backoff(initial_s=0.5, max_s=3.0, reset_after_s=60.0)
    assert [backoff.next_delay(ran_s=0.1) for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_backoff_starts_over_after_a_healthy_run() -> None:
    backoff = Backoff(initial_s=0.5, max_s=30.0, reset_after_s=60.0)
    for _ in range(4):
        backoff.next_delay(ran_s=1.0)
    assert backoff.next_delay(ran_s=59.9) == 8.0
    assert backoff.next_delay(ran_s=60.0) == 0.5
