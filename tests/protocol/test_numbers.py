"""The one parser for numbers read off a wire: ASCII digits only, bounded, one typed error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import NumberError, format_decimal, parse_decimal, parse_int, parse_uint

from .test_properties import QUICK


@pytest.mark.parametrize("text", ["0", "7", "007", "65535", "9" * 18])
def test_ascii_digits_up_to_eighteen_parse_as_int_would(text: str) -> None:
    assert parse_uint(text) == int(text)
    assert parse_uint(text.encode()) == int(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "²",  # str.isdigit() is true and int() raises
        "١٢",  # Arabic-Indic digits: int() takes them
        "１２",  # fullwidth digits: int() takes them
        " 7",
        "7 ",
        "7\n",
        "+7",
        "-7",
        "1_000",
        "0x10",
        "1e3",
        "7.0",
        b"\xc2\xb2",
    ],
)
def test_anything_but_ascii_digits_is_a_number_error(text: str | bytes) -> None:
    with pytest.raises(NumberError):
        parse_uint(text)


def test_digits_are_bounded_at_max_digits_and_not_one_more() -> None:
    assert parse_uint("1" * 5, max_digits=5) == 11111
    with pytest.raises(NumberError, match="more than 5 digits"):
        parse_uint("1" * 6, max_digits=5)
    with pytest.raises(NumberError, match="more than 18 digits"):
        parse_uint("9" * 5000)


def test_a_maximum_is_taken_at_n_and_refused_at_n_plus_one() -> None:
    assert parse_uint("65535", maximum=65535) == 65535
    with pytest.raises(NumberError, match="above 65535"):
        parse_uint("65536", maximum=65535)


def test_a_signed_int_takes_one_leading_minus_only() -> None:
    assert parse_int("-2") == -2
    assert parse_int("15") == 15
    for text in ("--2", "-", "+2", "-²"):
        with pytest.raises(NumberError):
            parse_int(text)


@pytest.mark.parametrize("text", ["0", "10", "2.5", "0.25", "300.0"])
def test_ascii_decimals_parse_as_float_would(text: str) -> None:
    assert parse_decimal(text) == float(text)


@pytest.mark.parametrize(
    "text", ["nan", "inf", "-inf", "Infinity", "1e3", "-1", "+1", ".5", "5.", "٣", " 1", "1_0"]
)
def test_nan_inf_exponents_signs_and_unicode_are_not_decimals(text: str) -> None:
    with pytest.raises(NumberError):
        parse_decimal(text)


def test_a_decimal_is_bounded_in_length_and_must_be_finite() -> None:
    assert parse_decimal("1" * 32) == float("1" * 32)
    with pytest.raises(NumberError, match="more than 32 characters"):
        parse_decimal("1" * 33)
    with pytest.raises(NumberError, match="out of range"):
        parse_decimal("9" * 400, max_chars=400)


def test_the_error_shows_a_short_prefix_of_the_text_only() -> None:
    with pytest.raises(NumberError) as caught:
        parse_uint("x" * 10_000)
    assert len(caught.value.detail) < 60
    assert isinstance(caught.value, ValueError)


@QUICK
@given(st.one_of(st.text(max_size=40), st.binary(max_size=40)))
def test_any_text_parses_or_raises_number_error_and_nothing_else(text: str | bytes) -> None:
    """Whatever arrives, the parsers give an int (a float) or NumberError."""
    for parse in (parse_uint, parse_int, parse_decimal):
        try:
            value = parse(text)
        except NumberError:
            continue
        raw = text if isinstance(text, bytes) else text.encode()
        assert raw.isascii()
        assert value == (float(raw) if parse is parse_decimal else int(raw))


@QUICK
@given(st.integers(min_value=0, max_value=10**18 - 1))
def test_every_int_written_in_decimal_reads_back_equal(number: int) -> None:
    assert parse_uint(str(number)) == number
    assert parse_int(str(-number)) == -number


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (2419200.0, "2419200"),  # ":g" wrote 2.4192e+06
        (1e22, "10000000000000000000000"),
        (0.00001, "0.00001"),  # str() wrote 1e-05
        (1.5e-7, "0.00000015"),
        (0.1, "0.1"),
        (-2.5, "-2.5"),
        (-0.0, "0"),
    ],
)
def test_a_decimal_is_written_in_plain_digits_never_with_an_exponent(
    number: float, text: str
) -> None:
    assert format_decimal(number) == text


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_only_finite_numbers_are_written(number: float) -> None:
    with pytest.raises(NumberError, match="not a finite number"):
        format_decimal(number)


@QUICK
@given(st.floats(min_value=0, max_value=1e15, allow_nan=False, allow_infinity=False))
def test_every_written_decimal_reads_back_as_the_same_float(number: float) -> None:
    """Whatever ``format_decimal`` writes, ``parse_decimal`` reads back equal."""
    text = format_decimal(number)
    assert parse_decimal(text, max_chars=len(text)) == number
