"""Tool calls as tasks and replies as tool results: PARTIAL and FAIL say what is missing."""

from __future__ import annotations

import pytest

from csp_web.core.daemon.compose import op_table
from csp_web.mcp_face.results import (
    ArgumentError,
    ToolOutcome,
    outcome_of,
    refused,
    task_for,
)
from csp_web.mcp_face.tools import ToolSpec, tool_spec
from protocol import ErrorCode, Reply, Status, Task
from specialists.tool import TOOL
from specialists.web import WEB


def tool(req: str) -> ToolSpec:
    (entry,) = [op.describe() for op in op_table((WEB, TOOL)) if op.req == req]
    return tool_spec(entry, max_timeout_ms=600_000)


def test_arguments_become_fields_spelled_as_on_the_wire() -> None:
    task = task_for(
        tool("fetch"),
        {"url": "https://a.test/x", "max_chars": 50, "no_cache": True, "timeout_ms": 900},
    )
    assert task == Task(
        "fetch",
        "WEB",
        "CONTENT",
        None,
        (
            ("URL", "https://a.test/x"),
            ("MAX_CHARS", "50"),
            ("NO_CACHE", "true"),
            ("TIMEOUT_MS", "900"),
        ),
    )


def test_a_repeatable_argument_repeats_its_field_and_json_travels_compact() -> None:
    task = task_for(
        tool("api"),
        {"endpoint": "x:/y", "headers": ["A:1", "B:2"], "payload": {"k": [1, "é"]}, "method": None},
    )
    assert task.fields == (
        ("ENDPOINT", "x:/y"),
        ("HEADERS", "A:1"),
        ("HEADERS", "B:2"),
        ("PAYLOAD", '{"k":[1,"é"]}'),
    )


def test_an_unknown_argument_is_unknown_field() -> None:
    with pytest.raises(ArgumentError) as caught:
        task_for(tool("fetch"), {"url": "https://a.test/", "URL": "https://b.test/"})
    assert (caught.value.code, caught.value.detail) == (ErrorCode.UNKNOWN_FIELD, "URL")


def test_a_list_for_a_single_field_is_invalid_field() -> None:
    with pytest.raises(ArgumentError) as caught:
        task_for(tool("fetch"), {"extract": ["text"]})
    assert (caught.value.code, caught.value.detail) == (
        ErrorCode.INVALID_FIELD,
        "extract takes one value",
    )


def test_a_wrongly_typed_scalar_is_passed_on_for_the_daemon_to_judge() -> None:
    task = task_for(tool("fetch"), {"url": "https://a.test/", "max_chars": "many"})
    assert task.fields[1] == ("MAX_CHARS", "many")  # the daemon answers invalid_field


def test_an_ok_reply_is_its_data_then_its_fields_and_structured_content() -> None:
    reply = Reply(
        Status.OK,
        (
            ("ID", "c1-1"),
            ("SCOPE", "[a.test]"),
            ("DATA", "# Title\n\nBody"),
            ("TITLE", "Title"),
            ("CITE", 'https://a.test/ "Title"'),
        ),
    )
    assert outcome_of(tool("fetch"), reply) == ToolOutcome(
        '# Title\n\nBody\n\nSCOPE [a.test]\nTITLE Title\nCITE https://a.test/ "Title"',
        {
            "STATUS": "OK",
            "SCOPE": "[a.test]",
            "DATA": "# Title\n\nBody",
            "TITLE": "Title",
            "CITE": ['https://a.test/ "Title"'],
        },
        False,
    )


def test_a_truncated_fetch_says_the_next_start_to_pass() -> None:
    reply = Reply(
        Status.PARTIAL,
        (("SCOPE", "[a.test]"), ("DATA", "abc"), ("NEXT_START", "3"), ("REMAINING_CHARS", "7")),
    )
    outcome = outcome_of(tool("fetch"), reply)
    assert outcome.text == (
        "abc\n\nSCOPE [a.test]\nNEXT_START 3\nREMAINING_CHARS 7\n\n"
        "TRUNCATED: 7 more characters; call web_fetch again with start=3 for the rest."
    )
    assert outcome.structured["STATUS"] == "PARTIAL"
    assert outcome.structured["NEXT_START"] == 3
    assert not outcome.is_error


def test_a_partial_without_a_next_start_says_part_is_missing() -> None:
    reply = Reply(Status.PARTIAL, (("SCOPE", "[]"), ("DATA", "url:https://a.test/")))
    assert outcome_of(tool("search"), reply).text.endswith(
        "\n\nPARTIAL: only part of what was asked; the fields above say what is missing."
    )


def test_a_partial_that_names_its_cause_shows_it_first_and_is_not_an_error() -> None:
    """SPEC R-2: a PARTIAL's ERROR names why part is missing (an empty page); the model reads
    it on the first line, and the result is still not an error result."""
    reply = Reply(
        Status.PARTIAL,
        (
            ("SCOPE", "[a.test]"),
            ("DATA", ""),
            ("ERROR", "empty_content:script_only,render_unavailable"),
            ("URL", "https://a.test/app"),
        ),
    )
    outcome = outcome_of(tool("fetch"), reply)
    assert outcome.text == (
        "PARTIAL BECAUSE empty_content:script_only,render_unavailable\n\n"
        "SCOPE [a.test]\nURL https://a.test/app\n\n"
        "PARTIAL: only part of what was asked; the fields above say what is missing."
    )
    assert outcome.structured["ERROR"] == "empty_content:script_only,render_unavailable"
    assert not outcome.is_error


def test_a_fail_is_an_error_result_with_its_code_and_detail() -> None:
    reply = Reply(
        Status.FAIL,
        (("SCOPE", "[a.test]"), ("DATA", "none"), ("ERROR", "fetch_failed:status 503")),
    )
    assert outcome_of(tool("fetch"), reply) == ToolOutcome(
        "ERROR fetch_failed:status 503\n\nSCOPE [a.test]",
        {"STATUS": "FAIL", "SCOPE": "[a.test]", "DATA": "none", "ERROR": "fetch_failed:status 503"},
        True,
    )


def test_a_rate_limit_says_when_to_retry() -> None:
    reply = Reply(
        Status.FAIL,
        (
            ("SCOPE", "[]"),
            ("DATA", "none"),
            ("ERROR", "rate_limited:search"),
            ("RETRY_AFTER", "12"),
        ),
    )
    outcome = outcome_of(tool("search"), reply)
    assert outcome.is_error
    assert outcome.text == (
        "ERROR rate_limited:search\n\nSCOPE []\nRETRY_AFTER 12\n\nRATE LIMITED: retry after 12 s."
    )
    assert outcome.structured["RETRY_AFTER"] == 12


def test_a_refusal_by_the_face_reads_as_a_daemon_fail() -> None:
    assert refused(ErrorCode.UNKNOWN_OP, "web_nope") == ToolOutcome(
        "ERROR unknown_op:web_nope",
        {"STATUS": "FAIL", "SCOPE": "mcp", "DATA": "none", "ERROR": "unknown_op:web_nope"},
        True,
    )


def test_repeatable_fields_take_one_value_by_name_and_several_by_their_plural() -> None:
    """Issue 28: a client gives ``url`` one string, as every fetch tool takes it; several go
    in ``urls``, after ``url`` when both are given."""
    task = task_for(
        tool("fetch"), {"url": "https://a.test/", "urls": ["https://b.test/", "https://c.test/"]}
    )
    assert task.fields == (
        ("URL", "https://a.test/"),
        ("URL", "https://b.test/"),
        ("URL", "https://c.test/"),
    )
    assert task_for(tool("fetch"), {"urls": "https://b.test/"}).fields == (
        ("URL", "https://b.test/"),
    )
    with pytest.raises(ArgumentError) as caught:
        task_for(tool("fetch"), {"url": ["https://a.test/", "https://b.test/"]})
    assert (caught.value.code, caught.value.detail) == (
        ErrorCode.INVALID_FIELD,
        "url takes one value",
    )


def test_structured_values_are_typed_as_the_op_table_types_them() -> None:
    """Issue 28: WORD_COUNT is an integer, CACHED a boolean, a field that may repeat a list
    even when it came once; the text is the wire's, unchanged."""
    reply = Reply(
        Status.PARTIAL,
        (
            ("SCOPE", "[a.test]"),
            ("DATA", "abc"),
            ("WORD_COUNT", "80"),
            ("CACHED", "false"),
            ("TRUNCATED", "true"),
            ("NEXT_START", "-0"),
            ("SUMMARY", "One point."),
        ),
    )
    outcome = outcome_of(tool("fetch"), reply)
    assert outcome.structured == {
        "STATUS": "PARTIAL",
        "SCOPE": "[a.test]",
        "DATA": "abc",
        "WORD_COUNT": 80,
        "CACHED": False,
        "TRUNCATED": True,
        "NEXT_START": 0,
        "SUMMARY": ["One point."],
    }
    assert "WORD_COUNT 80\nCACHED false\nTRUNCATED true" in outcome.text


def test_a_decimal_field_is_a_number() -> None:
    entry = {
        "req": "node",
        "in": "TOOL",
        "out": "NODE_RESULT",
        "replies": [{"name": "ACCURACY_M", "always": False, "type": "number"}],
    }
    node = tool_spec(entry, max_timeout_ms=1000)
    reply = Reply(
        Status.OK,
        (("ACCURACY_M", "10.5"), ("ACCURACY_M", "11"), ("EXTRA", "a"), ("EXTRA", "b")),
    )
    assert outcome_of(node, reply).structured == {
        "STATUS": "OK",
        "ACCURACY_M": 10.5,  # declared single: the first (a list would fail the schema)
        "EXTRA": ["a", "b"],  # undeclared and repeated: a list, as before
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("WORD_COUNT", "eighty"),
        (
            "WORD_COUNT",
            "\u0668\u0660",
        ),  # Arabic-Indic digits: int() reads them, the wire's are ASCII
        ("WORD_COUNT", "1_000"),
        ("WORD_COUNT", "9" * 31),
        ("CACHED", "yes"),
    ],
)
def test_a_value_that_does_not_read_as_its_type_is_left_out_of_structured_content(
    field: str, value: str
) -> None:
    """A client validating against the output schema would refuse the whole result for one
    wrong value; the text still carries it."""
    reply = Reply(Status.OK, (("DATA", "x"), (field, value)))
    outcome = outcome_of(tool("fetch"), reply)
    assert outcome.structured == {"STATUS": "OK", "DATA": "x"}
    assert f"{field} {value}" in outcome.text
