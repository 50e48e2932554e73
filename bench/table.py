"""The one table of benchmark figures that ``scripts/bench`` prints (issue 26, goal 7).

Each bench prints, among whatever else it says, lines of five tab-separated fields::

    measure<TAB>value<TAB>anchor<TAB>ratio<TAB>goal

``value`` and ``anchor`` carry their units ("0.41 ms", "0.22 ms ping p50"); ``ratio`` is
value / anchor as a number ("1.86" or "1.86x"); ``goal`` is a comparison: against the
ratio when its unit is ``x`` or ``%`` ("<= 2x", ">= 90%"; a ratio of 0.93 or 93% meets the
latter), else against the value's leading
number in the value's own unit ("<= 0.3 ms", ">= 1.3 cores"). Any other line is ignored.
A goal this module cannot read shows as ``?``, never as met; an empty goal (or ``-``) marks
a figure shown for context.

Pure: text in, rows and text out (tests/test_bench_table.py).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

ERROR_CHARS = 90
NO_GOAL = ("", "-", "–")  # a figure shown for context
COLUMNS = ("bench", "measure", "csp-web", "anchor", "ratio", "goal", "met?", "load avg")
# A number, with thousands commas and a k or M suffix ("1,177k/s"), not a unit's first letter.
_NUMBER = re.compile(r"([-+]?(?:\d[\d,]*(?:\.\d+)?|\.\d+))([kM](?![A-Za-z]))?")
_SCALE = {None: 1.0, "k": 1e3, "M": 1e6}
_GOAL = re.compile(r"^\s*(<=|>=|≤|≥|<|>)\s*(" + _NUMBER.pattern + r")\s*(\S*)")
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "≤": operator.le,
    ">=": operator.ge,
    "≥": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}


@dataclass(frozen=True)
class Row:
    """One figure of one bench; ``met`` is "yes", "NO", "?", "" (no goal) or "error"."""

    bench: str
    measure: str
    value: str
    anchor: str
    ratio: str
    goal: str
    met: str
    load: str

    def cells(self) -> tuple[str, ...]:
        fields = (self.measure, self.value, self.anchor, self.ratio, self.goal, self.met)
        return (self.bench, *fields, self.load)


def leading_number(text: str) -> float | None:
    """The first number in ``text`` ("1,234.5 frames/s" -> 1234.5, "30k/s" -> 30000), or None."""
    match = _NUMBER.search(text)
    return number(match) if match else None


def number(match: re.Match[str]) -> float:
    return float(match.group(1).replace(",", "")) * _SCALE[match.group(2)]


def verdict(value: str, ratio: str, goal: str) -> str:
    """ "yes" when the figure meets ``goal``, "NO" when it misses, "?" when either cannot be
    read (a goal in words, a missing number), "" when there is no goal (a figure shown for
    context)."""
    if goal.strip() in NO_GOAL:
        return ""
    match = _GOAL.match(goal)
    if match is None:
        return "?"
    sign, unit = match.group(1), match.group(5)
    bound = leading_number(match.group(2))
    assert bound is not None  # the goal pattern matched a number there
    on_ratio = unit.lower() in ("x", "×", "%")
    figure = leading_number(ratio if on_ratio else value)
    if figure is None:
        return "?"
    if unit == "%" and "%" not in ratio:
        figure *= 100
    return "yes" if _COMPARE[sign](figure, bound) else "NO"


def parse(bench: str, output: str, load: str) -> list[Row]:
    """The rows among ``bench``'s output lines: those of exactly five tab-separated fields
    whose first is not empty."""
    rows = []
    for line in output.splitlines():
        fields = [field.strip() for field in line.split("\t")]
        if len(fields) != 5 or not fields[0]:
            continue
        measure, value, anchor, ratio, goal = fields
        met = verdict(value, ratio, goal)
        rows.append(Row(bench, measure, value, anchor, ratio, goal, met, load))
    return rows


def failed(bench: str, error: str, load: str) -> Row:
    """The row that stands for a bench that could not give its figures: the reason, cut at
    ``ERROR_CHARS`` (the bench's log holds it whole), where the measure goes."""
    return Row(bench, error[:ERROR_CHARS], "", "", "", "", "error", load)


def render(rows: Iterable[Row]) -> str:
    """The rows as a plain-text table with a header, columns padded to their widest cell."""
    lines = [COLUMNS, *(row.cells() for row in rows)]
    widths = [max(len(line[index]) for line in lines) for index in range(len(COLUMNS))]
    text = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        for line in lines
    ]
    text.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in text)
