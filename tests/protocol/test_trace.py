"""TRACEPARENT (SPEC D-3): W3C Trace Context's ``traceparent``, read strictly."""

from __future__ import annotations

import pytest

from protocol import MAX_TRACEPARENT_CHARS, TraceParent, TraceParentError, parse_traceparent

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
VALID = f"00-{TRACE}-{PARENT}-01"


def test_a_version_00_traceparent_parses_into_its_trace_parent_and_flags() -> None:
    parsed = parse_traceparent(VALID)
    assert parsed == TraceParent(TRACE, PARENT, "01")
    assert parsed.sampled


def test_flags_without_the_sampled_bit_say_not_sampled() -> None:
    assert not parse_traceparent(f"00-{TRACE}-{PARENT}-00").sampled
    assert parse_traceparent(f"00-{TRACE}-{PARENT}-ff").sampled


def test_a_later_version_is_read_by_its_first_four_fields() -> None:
    assert parse_traceparent(f"01-{TRACE}-{PARENT}-01") == TraceParent(TRACE, PARENT, "01")
    assert parse_traceparent(f"fe-{TRACE}-{PARENT}-01-extra") == TraceParent(TRACE, PARENT, "01")


def test_a_later_version_at_the_length_bound_parses_and_one_past_it_does_not() -> None:
    head = f"01-{TRACE}-{PARENT}-01-"
    at_bound = head + "x" * (MAX_TRACEPARENT_CHARS - len(head))
    assert len(at_bound) == MAX_TRACEPARENT_CHARS
    assert parse_traceparent(at_bound).trace_id == TRACE
    with pytest.raises(TraceParentError, match="over 128 chars"):
        parse_traceparent(at_bound + "x")


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("", "lower-case hex"),
        (VALID[:-1], "lower-case hex"),  # 54 chars: flags cut short
        (VALID.upper(), "lower-case hex"),
        (f"00-{TRACE.upper()}-{PARENT}-01", "lower-case hex"),
        (f"00-{TRACE}-{PARENT.upper()}-01", "lower-case hex"),
        (f"00-{TRACE}-{PARENT}-0A", "lower-case hex"),
        (f"0-{TRACE}-{PARENT}-01", "lower-case hex"),
        (f"00-{TRACE[:-1]}-{PARENT}-01", "lower-case hex"),
        (f"00-{TRACE}g-{PARENT}-01", "lower-case hex"),
        (f"00_{TRACE}_{PARENT}_01", "lower-case hex"),
        (f" {VALID}", "lower-case hex"),
        (f"ff-{TRACE}-{PARENT}-01", "version ff"),
        (VALID + "-", "version 00 is exactly 55"),  # 56 chars
        (VALID + "0", "version 00 is exactly 55"),
        (f"01-{TRACE}-{PARENT}-010", "follow a -"),
        (f"00-{'0' * 32}-{PARENT}-01", "trace id is all zero"),
        (f"00-{TRACE}-{'0' * 16}-01", "parent id is all zero"),
    ],
)
def test_a_value_breaking_a_rule_is_refused_naming_the_rule(text: str, rule: str) -> None:
    with pytest.raises(TraceParentError, match=rule) as caught:
        parse_traceparent(text)
    assert rule in caught.value.detail
    assert isinstance(caught.value, ValueError)


def test_ids_with_a_single_nonzero_digit_are_valid() -> None:
    parsed = parse_traceparent(f"00-{'0' * 31}1-{'0' * 15}1-00")
    assert (parsed.trace_id[-1], parsed.parent_id[-1]) == ("1", "1")
