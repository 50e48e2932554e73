"""Numbers read off a wire: ASCII digits only, bounded length, one typed error.

Python's ``int()`` takes what no peer should send: ``"²"`` passes ``str.isdigit()`` and then
makes ``int()`` raise; ``"١٢"`` (Arabic-Indic digits), ``" 7"``, ``"+7"`` and ``"1_000"`` all
parse; and a 5,000-digit string costs quadratic time before Python's own limit refuses it.
``float()`` adds ``nan``, ``inf`` and exponents. Every number a peer, a file or the environment
hands the daemon goes through here instead, so each of those is one clear error.
"""

from __future__ import annotations

import decimal
import math
import re

# 18 digits hold every count, size and port the daemon reads and stay inside int64.
MAX_DIGITS = 18
_UINT = re.compile(rb"[0-9]+")
_DECIMAL = re.compile(rb"[0-9]+(?:\.[0-9]+)?")


class NumberError(ValueError):
    """Text that is not a number of the asked form. ``detail`` says why, without echoing
    more than a short prefix of the text. A ValueError, so a loader that already turns
    ValueError into its own error keeps doing so."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def parse_uint(
    text: str | bytes, *, max_digits: int = MAX_DIGITS, maximum: int | None = None
) -> int:
    """The non-negative integer ``text`` spells in ASCII digits (leading zeros allowed).

    Raises NumberError for anything else: empty, a sign, spaces, underscores, non-ASCII
    digits, more than ``max_digits`` digits, or above ``maximum`` when one is given.
    """
    raw = _ascii(text)
    if not _UINT.fullmatch(raw):
        raise NumberError(f"not ASCII digits: {_shown(raw)}")
    if len(raw) > max_digits:
        raise NumberError(f"more than {max_digits} digits")
    number = int(raw)
    if maximum is not None and number > maximum:
        raise NumberError(f"above {maximum}")
    return number


def parse_int(text: str | bytes, *, max_digits: int = MAX_DIGITS) -> int:
    """``parse_uint`` with one optional leading ``-`` (Redis answers -1 and -2 for "none")."""
    raw = _ascii(text)
    if raw.startswith(b"-"):
        return -parse_uint(raw[1:], max_digits=max_digits)
    return parse_uint(raw, max_digits=max_digits)


def parse_decimal(text: str | bytes, *, max_chars: int = 32) -> float:
    """The non-negative finite number ``text`` spells as ``digits[.digits]`` in ASCII.

    Raises NumberError for anything else: signs, exponents, ``nan``, ``inf``, spaces,
    non-ASCII digits, or more than ``max_chars`` characters.
    """
    raw = _ascii(text)
    if len(raw) > max_chars:
        raise NumberError(f"more than {max_chars} characters")
    if not _DECIMAL.fullmatch(raw):
        raise NumberError(f"not an ASCII decimal: {_shown(raw)}")
    value = float(raw)
    if not math.isfinite(value):  # 400 digits overflow a double to inf
        raise NumberError("out of range")
    return value


def format_decimal(value: float) -> str:
    """``value`` written as ``[-]digits[.digits]``, never with an exponent: the shortest
    digits that read back as the same float, a whole number without ``.0``. Python's ``str``
    and ``:g`` write 2419200.0 as ``2.4192e+06`` and 0.00001 as ``1e-05``, which no reader
    of ``parse_decimal`` (or of a line of figures) should meet. Raises NumberError for
    ``nan`` and the infinities."""
    if not math.isfinite(value):
        raise NumberError(f"not a finite number: {value!r}")
    if value.is_integer():
        return str(int(value))
    return format(decimal.Decimal(repr(value)), "f")


def _ascii(text: str | bytes) -> bytes:
    if isinstance(text, bytes):
        return text
    try:
        return text.encode("ascii")
    except UnicodeEncodeError:
        raise NumberError(f"not ASCII digits: {_shown(text)}") from None


def _shown(text: str | bytes) -> str:
    """A short, printable prefix of ``text`` for an error detail (never the whole input)."""
    if isinstance(text, bytes):
        text = text.decode("ascii", "backslashreplace")
    return ascii(text[:16])
