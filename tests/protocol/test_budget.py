"""BUDGET (SPEC D-3): what a task may spend, read strictly; BUDGET_LEFT written back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import DIMENSIONS, MAX_AMOUNT, BudgetError, format_budget, parse_budget
from protocol._budget import MAX_BUDGET_CHARS

FULL = (
    "searches:5,fetches:20,bytes:5MB,llm_tokens:20000,exec_cpu_ms:30000,"
    "browser_actions:50,wall_ms:60000"
)


def test_every_dimension_parses_in_one_value() -> None:
    assert parse_budget(FULL) == {
        "searches": 5,
        "fetches": 20,
        "bytes": 5 * 1024 * 1024,
        "llm_tokens": 20000,
        "exec_cpu_ms": 30000,
        "browser_actions": 50,
        "wall_ms": 60000,
    }


def test_any_subset_parses_and_comes_back_in_dimension_order() -> None:
    assert list(parse_budget("wall_ms:1,searches:0")) == ["searches", "wall_ms"]


@pytest.mark.parametrize(
    ("text", "amount"),
    [("7", 7), ("7B", 7), ("2KB", 2048), ("5MB", 5 * 1024**2), ("1GB", 1024**3), ("007", 7)],
)
def test_bytes_take_binary_units(text: str, amount: int) -> None:
    assert parse_budget(f"bytes:{text}") == {"bytes": amount}


def test_an_amount_at_the_maximum_parses_and_one_past_it_does_not() -> None:
    assert parse_budget(f"fetches:{MAX_AMOUNT}") == {"fetches": MAX_AMOUNT}
    with pytest.raises(BudgetError, match=f"fetches above {MAX_AMOUNT}"):
        parse_budget(f"fetches:{MAX_AMOUNT + 1}")
    with pytest.raises(BudgetError, match="bytes above"):
        parse_budget(f"bytes:{MAX_AMOUNT // 1024**3 + 1}GB")


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("", "is empty"),
        ("bytes:5mb", "bytes must be digits with an optional B, KB, MB or GB"),
        ("bytes:5 MB", "bytes must be digits"),
        ("bytes:1.5MB", "bytes must be digits"),
        ("bytes:MB", "bytes must be digits"),
        ("bytes:5TB", "bytes must be digits"),
        ("fetches:-1", "fetches must be digits"),
        ("fetches:+1", "fetches must be digits"),
        ("fetches:1e3", "fetches must be digits"),
        ("fetches:1_000", "fetches must be digits"),
        ("fetches:", "fetches must be digits"),
        ("fetches:5KB", "fetches must be digits"),
        ("fetches:١٢", "fetches must be digits"),
        ("fetches:" + "9" * 19, f"fetches above {MAX_AMOUNT}"),
        ("fetches:" + "9" * 5000, f"over {MAX_BUDGET_CHARS} chars"),
        ("fetches:1,fetches:2", "fetches given twice"),
        ("dollars:5", "unknown dimension 'dollars'"),
        ("Fetches:5", "unknown dimension 'Fetches'"),
        ("fetches 5", "'fetches 5' is not dimension:amount"),
        ("fetches:1,", "'' is not dimension:amount"),
        (" fetches:1", "unknown dimension ' fetches'"),
        ("x" * (MAX_BUDGET_CHARS + 1), f"over {MAX_BUDGET_CHARS} chars"),
    ],
)
def test_a_value_breaking_the_syntax_names_its_rule(text: str, rule: str) -> None:
    with pytest.raises(BudgetError, match=rule.replace("+", r"\+").replace(".", r"\.")):
        parse_budget(text)


def test_leading_zeros_are_read_past_the_digit_bound() -> None:
    assert parse_budget("fetches:" + "0" * 200 + "1") == {"fetches": 1}


def test_budget_left_writes_what_is_left_in_plain_bytes_and_never_below_zero() -> None:
    assert format_budget({"bytes": 5 * 1024**2, "fetches": -3}) == "fetches:0,bytes:5242880"
    assert format_budget({}) == ""


@given(st.dictionaries(st.sampled_from(DIMENSIONS), st.integers(0, MAX_AMOUNT), min_size=1))
def test_whatever_budget_left_writes_parses_back_equal(amounts: dict[str, int]) -> None:
    assert parse_budget(format_budget(amounts)) == amounts


@given(st.text(max_size=80))
def test_any_text_either_parses_or_raises_budget_error(text: str) -> None:
    try:
        parsed = parse_budget(text)
    except BudgetError:
        return
    assert all(0 <= amount <= MAX_AMOUNT for amount in parsed.values())
