"""The BUDGET value (SPEC D-3): what one task, or the tasks sharing a BUDGET_ID, may spend.

    searches:5,fetches:20,bytes:5MB,llm_tokens:20000,exec_cpu_ms:30000,browser_actions:50,wall_ms:60000

Any subset of the dimensions, each at most once, comma-separated without spaces; each amount
is ASCII digits (no sign, exponent, underscore or fraction). ``bytes`` may end in ``B``,
``KB``, ``MB`` or ``GB`` (upper case, no space): binary multiples (1 KB = 1024 B), as every
size the daemon names is (``50 MiB``). An amount above ``MAX_AMOUNT`` is refused rather than
read, so no ledger ever holds a number past int64. ``BUDGET_LEFT`` on replies is written by
``format_budget`` in the same syntax, ``bytes`` as plain bytes.
"""

from __future__ import annotations

import functools
import re

from ._numbers import MAX_DIGITS

# The dimensions in the order BUDGET_LEFT lists them.
DIMENSIONS = (
    "searches",
    "fetches",
    "bytes",
    "llm_tokens",
    "exec_cpu_ms",
    "browser_actions",
    "wall_ms",
)
# 2**50: a pebibyte, or 35,000 years of milliseconds: past any task, and a sum of every
# dimension's charges stays far inside int64 (Redis's INCRBY, SQLite's INTEGER).
MAX_AMOUNT = 2**50
MAX_BUDGET_CHARS = 256  # all seven dimensions at their largest fit in about 170
_UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}
_SIZE = re.compile(r"([0-9]+)(B|KB|MB|GB)?")  # [0-9]: ASCII digits only, as NumberError's
_COUNT = re.compile(r"([0-9]+)")

Budget = dict[str, int]


class BudgetError(ValueError):
    """A BUDGET value that breaks the syntax; the message names the part and the rule."""


def parse_budget(text: str) -> Budget:
    """The amounts ``text`` names, by dimension, in ``DIMENSIONS`` order. Raises BudgetError
    for an empty value, an unknown or repeated dimension, or an amount that is not digits
    (with a unit, for ``bytes`` only) or is above ``MAX_AMOUNT``."""
    return dict(_parsed(text))


# An agent sends one BUDGET on frame after frame, and each is read twice (checked with the
# frame, then opened): the last few are kept. A value that fails is never kept.
@functools.lru_cache(maxsize=64)
def _parsed(text: str) -> tuple[tuple[str, int], ...]:
    if not text:
        raise BudgetError("is empty")
    if len(text) > MAX_BUDGET_CHARS:
        raise BudgetError(f"over {MAX_BUDGET_CHARS} chars")
    amounts: Budget = {}
    for part in text.split(","):
        name, sep, amount = part.partition(":")
        if not sep:
            raise BudgetError(f"{_shown(part)} is not dimension:amount")
        if name not in DIMENSIONS:
            raise BudgetError(f"unknown dimension {_shown(name)}")
        if name in amounts:
            raise BudgetError(f"{name} given twice")
        amounts[name] = _amount(name, amount)
    return tuple((name, amounts[name]) for name in DIMENSIONS if name in amounts)


def format_budget(amounts: Budget) -> str:
    """``amounts`` in BUDGET syntax (``DIMENSIONS`` order, bytes in plain bytes); negative
    amounts are written as 0 (an overrun settled past the limit leaves nothing)."""
    return ",".join(f"{name}:{max(0, amounts[name])}" for name in DIMENSIONS if name in amounts)


def _amount(name: str, text: str) -> int:
    match = (_SIZE if name == "bytes" else _COUNT).fullmatch(text)
    if match is None:
        hint = " with an optional B, KB, MB or GB" if name == "bytes" else ""
        raise BudgetError(f"{name} must be digits{hint}")
    digits = match.group(1).lstrip("0") or "0"
    unit = match.group(2) if name == "bytes" else None
    # Past MAX_DIGITS the number is never built: a 5,000-digit amount costs nothing to refuse.
    if len(digits) > MAX_DIGITS or int(digits) * _UNITS[unit or "B"] > MAX_AMOUNT:
        raise BudgetError(f"{name} above {MAX_AMOUNT}")
    return int(digits) * _UNITS[unit or "B"]


def _shown(text: str) -> str:
    return repr(text[:32])
