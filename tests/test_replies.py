"""Reply rendering: field order, FAIL shape, PARTIAL, citations (SPEC R-1 to R-4)."""

from __future__ import annotations

from csp_web.core.api.errors import OpError
from csp_web.core.api.replies import Result, cite, fail_reply, format_scope, ok_reply, with_id
from protocol import Connection, ErrorCode, Reply, Status, serialize


def _round_trip(reply: Reply) -> Reply:
    codec = Connection()
    codec.receive_data(serialize(reply))
    event = codec.next_event()
    assert isinstance(event, Reply)
    return event


def test_ok_reply_orders_status_id_scope_data_then_fields() -> None:
    """R-1: STATUS, then ID, SCOPE, DATA and the op's fields."""
    reply = ok_reply(Result("url:https://a.example/", ("a.example",), (("TITLE", "A"),)), "q1")
    assert serialize(reply) == (
        b'STATUS OK\nID q1\nSCOPE [a.example]\nDATA url:https://a.example/\nTITLE "A"\n\n'
    )


def test_fail_reply_carries_scope_data_error_then_extra_fields() -> None:
    """R-2: the seed's FAIL shape, detail after the colon, extra fields after ERROR."""
    error = OpError(ErrorCode.FETCH_FAILED, "timeout", fields=(("URL", "https://slow.example"),))
    assert serialize(fail_reply(error, None)) == (
        b"STATUS FAIL\nSCOPE []\nDATA none\nERROR fetch_failed:timeout\n"
        b"URL https://slow.example\n\n"
    )
    shell = OpError(ErrorCode.COMMAND_FAILED, "npm test", scope=("shell",), data="exit:1")
    assert fail_reply(shell, "e1").fields[:4] == (
        ("ID", "e1"),
        ("SCOPE", "[shell]"),
        ("DATA", "exit:1"),
        ("ERROR", "command_failed:npm test"),
    )


def test_partial_status_and_its_missing_part_fields_survive_the_wire() -> None:
    """R-3: PARTIAL says what is missing (fetch: NEXT_START, REMAINING_CHARS)."""
    result = Result(
        "first page",
        ("a.example",),
        (("NEXT_START", "8000"), ("REMAINING_CHARS", "1200")),
        Status.PARTIAL,
    )
    reply = _round_trip(ok_reply(result, None))
    assert reply.status is Status.PARTIAL
    assert reply.get("NEXT_START") == "8000"
    assert reply.get("REMAINING_CHARS") == "1200"


def test_cite_lines_name_url_and_quoted_title() -> None:
    """R-4: one CITE line per source, the title quoted, an unknown title empty."""
    result = Result(
        "...",
        ("a.example",),
        (cite("https://a.example/x", 'Say "hi"'), cite("https://b.example/", None)),
    )
    reply = _round_trip(ok_reply(result, None))
    assert reply.get_all("CITE") == ['https://a.example/x "Say \\"hi\\""', 'https://b.example/ ""']


def test_scope_uses_the_seed_list_spelling() -> None:
    assert format_scope(["neo4j.com", "github.com"]) == "[neo4j.com,github.com]"
    assert format_scope([]) == "[]"


def test_with_id_puts_the_reply_under_the_given_id_whatever_its_status() -> None:
    """M-3: a relayed reply goes back under the client's ID (or none), its fields kept."""
    theirs = Reply(Status.FAIL, (("ID", "r-1"), ("SCOPE", "[memory]"), ("ERROR", "x:y")))
    assert with_id(theirs, "mine") == Reply(
        Status.FAIL, (("ID", "mine"), ("SCOPE", "[memory]"), ("ERROR", "x:y"))
    )
    assert with_id(theirs, None) == Reply(Status.FAIL, (("SCOPE", "[memory]"), ("ERROR", "x:y")))


def test_the_error_line_is_spelt_once_by_op_error_wire_text() -> None:
    error = OpError(ErrorCode.BUSY, "web: 5 running, 10 queued")
    assert error.wire_text == "busy:web: 5 running, 10 queued"
    assert fail_reply(error, None).get("ERROR") == error.wire_text
