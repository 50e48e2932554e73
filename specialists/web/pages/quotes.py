"""Quotes located in a stored text: the support a summary's or research answer's bullet
carries, checked against the snapshot before the reply is sent (issue 29).

    folded = fold(stored)                   # once per text: a searchable view with a map back
    span = locate(folded, "the tide rose")  # Span(start, end, sha256, text) or None
    span.text == stored[span.start:span.end]

Offsets are Unicode code points of the stored text (the Markdown a fileKey holds, or the TEXT
given to summarize), ``end`` exclusive, and ``sha256`` is the hex SHA-256 of
``stored[start:end]`` encoded as UTF-8: whoever holds the snapshot checks a quote with
``hashlib.sha256(stored[start:end].encode()).hexdigest()``, without this code.

Matching is exact on the words and tolerant of how they were written down. Both the stored
text and the quote are folded alike:

- every run of whitespace (newlines, tabs, NBSP, U+3000) is one space; soft hyphens and
  zero-width characters are dropped;
- curly quotes and primes read as ``'`` or ``"``, guillemets as ``"``, every dash and the
  minus sign as ``-``, the ellipsis ``…`` as ``...``;
- Markdown markup reads as the text it marks: emphasis and code marks (``*``, ``_``, a
  backtick) and backslash escapes are dropped, a link ``[words](url)`` reads as ``words``, an
  image as nothing, and a heading, list or blockquote marker at a line's start as nothing.
  So a quote may run across a link or emphasis; its span then holds the markup too.

Letter case, digits and other punctuation must match as they are. A match begins and ends on
a character of the stored text that the quote's first and last characters stand for.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from protocol import Field

# Markup and spellings that fold (see the module docstring). The lookahead lets an ordinary
# character fail at once (bench/verify.py: 5x faster than trying each alternative at each
# position); a plain single space is copied with the text around it.
_MARKER = r"[ \t]*(?:#{1,6}[ \t]+|>[ \t>]*|(?:[-*+•]|\d{1,3}[.)])[ \t]+)"
_TOKENS = re.compile(
    r"(?=\A|[^\S ]|  |[!\[\]*_`\\\u00ad\u200b-\u200d\u2060\ufeff‘’‚‛′“”„‟″«»‐‑‒–—―−…])"
    rf"(?:(?P<marker>\A{_MARKER})"
    rf"|(?P<space>[^\S\n]*\n(?:{_MARKER})?|[^\S\n]{{2,}}|[^\S ])"
    r"|(?P<image>!\[[^\]\n]*\]\([^)\n]*\))"
    r"|(?P<open>\[(?=[^\]\n]*\]\([^)\n]*\)))"
    r"|(?P<close>\]\([^)\n]*\))"
    r"|(?P<markup>[*_`]+|\\(?=[!-/:-@\[-`{-~])|[\u00ad\u200b-\u200d\u2060\ufeff])"
    r"|(?P<fold>[‘’‚‛′“”„‟″«»‐‑‒–—―−…]))"
)
_FOLDS = (
    {c: "'" for c in "‘’‚‛′"}
    | {c: '"' for c in "“”„‟″«»"}
    | {c: "-" for c in "‐‑‒–—―−"}
    | {"…": "..."}
)
_RAW_UNSAFE = re.compile(r"[\x7f-\x9f\u2028\u2029]")  # raw in JSON, not on a CSP/1 line (F-5)
MAX_OCCURRENCES = 1000  # how many matches of one quote are weighed against a given offset
# The longest span a QUOTE line shows: a quote is at most 600 characters (a model's, cut), and
# the markup between its words (link targets, emphasis) may add as much again and more.
SHOWN_SPAN_CHARS = 2000


@dataclass(frozen=True)
class Span:
    """Where a quote stands in a stored text: ``text == stored[start:end]``."""

    start: int
    end: int
    sha256: str
    text: str


class Folded:
    """A text folded for matching, with the map from each folded character back to the
    characters of the original it stands for."""

    def __init__(self, original: str) -> None:
        self.original = original
        parts: list[str] = []
        # One segment per run: where it starts in the folded text, the original range it
        # stands for, and whether it was copied (character for character) or folded.
        self._starts: list[int] = []
        self._segments: list[tuple[int, int, bool]] = []
        self._size = 0
        position = 0
        for match in _TOKENS.finditer(original):
            self._copy(parts, position, match.start())
            self._token(parts, match)
            position = match.end()
        self._copy(parts, position, len(original))
        self.text = "".join(parts)

    def _copy(self, parts: list[str], start: int, end: int) -> None:
        if start < end and self.original[start] == " " and self._after_space(parts):
            start += 1  # a space after a folded one: runs of spaces stay one
        if start < end:
            self._append(parts, self.original[start:end], start, end, copied=True)

    def _token(self, parts: list[str], match: re.Match[str]) -> None:
        kind, start, end = match.lastgroup, match.start(), match.end()
        if kind == "space" and not self._after_space(parts):
            self._append(parts, " ", start, end, copied=False)
        elif kind == "fold":
            self._append(parts, _FOLDS[match.group()], start, end, copied=False)

    def _after_space(self, parts: list[str]) -> bool:
        return not parts or parts[-1].endswith(" ")

    def _append(self, parts: list[str], text: str, start: int, end: int, *, copied: bool) -> None:
        parts.append(text)
        self._starts.append(self._size)
        self._segments.append((start, end, copied))
        self._size += len(text)

    def original_range(self, start: int, end: int) -> tuple[int, int]:
        """The original's ``[start, end)`` that folded ``[start, end)`` (non-empty) stands for."""
        return self._original_at(start, first=True), self._original_at(end - 1, first=False)

    def _original_at(self, index: int, *, first: bool) -> int:
        segment = bisect.bisect_right(self._starts, index) - 1
        start, end, copied = self._segments[segment]
        if copied:
            return start + index - self._starts[segment] + (0 if first else 1)
        return start if first else end


def fold(text: str) -> Folded:
    """``text`` folded for ``locate``; O(len(text)), done once per stored text."""
    return Folded(text)


def folded_quote(quote: str) -> str:
    """What ``quote`` must match in a folded text: folded, without edge spaces."""
    return Folded(quote).text.strip(" ")


def span_of(stored: str, start: int, end: int) -> Span:
    """The span ``stored[start:end]`` with its hash."""
    text = stored[start:end]
    return Span(start, end, hashlib.sha256(text.encode("utf-8")).hexdigest(), text)


def locate(
    folded: Folded, quote: str, *, near: int | None = None, max_span_chars: int | None = None
) -> Span | None:
    """Where ``quote`` stands in ``folded``'s original: the first match, or with ``near``
    the match starting closest to that offset (the one starting there when there is one);
    None when it stands nowhere or folds to nothing. A match whose span in the original
    passes ``max_span_chars`` (a page may pad a few words with megabytes of markup or
    spaces) is passed over."""
    needle = folded_quote(quote)
    if not needle:
        return None
    best: tuple[int, int] | None = None
    for start, end in _matches(folded, needle):
        if max_span_chars is not None and end - start > max_span_chars:
            continue
        if near is None:
            return span_of(folded.original, start, end)
        if best is None or abs(start - near) < abs(best[0] - near):
            best = (start, end)
    return None if best is None else span_of(folded.original, *best)


def _matches(folded: Folded, needle: str) -> Iterator[tuple[int, int]]:
    at = folded.text.find(needle)
    for _ in range(MAX_OCCURRENCES):
        if at < 0:
            return
        yield folded.original_range(at, at + len(needle))
        at = folded.text.find(needle, at + 1)


def locate_all(stored: str, quotes: Sequence[str]) -> list[Span | None]:
    """Each quote's first span in ``stored`` of at most SHOWN_SPAN_CHARS (None where there
    is none); ``stored`` is folded once. CPU-bound: callers run it in a worker thread."""
    folded = fold(stored)
    return [locate(folded, quote, max_span_chars=SHOWN_SPAN_CHARS) for quote in quotes]


def quoted(text: str) -> str:
    """``text`` as one JSON string literal a CSP/1 line may hold raw (SPEC V-2): newlines,
    quotes and C0 controls escaped by JSON, DEL, C1 controls and line separators too."""
    literal = json.dumps(text, ensure_ascii=False)
    return _RAW_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", literal)


def quote_line(number: int, source: str, span: Span) -> str:
    """``<n> <source> @<start>-<end> sha256:<hex> "<span>"``: a bullet's support."""
    return f"{number} {source} @{span.start}-{span.end} sha256:{span.sha256} {quoted(span.text)}"


def support_fields(supports: Sequence[tuple[str, Span] | None], dropped: int) -> list[Field]:
    """The reply lines for bullets 1..n: ``QUOTE`` for each one whose (source, span) was
    found, ``UNVERIFIED <n>`` for each other, then the counts (``dropped`` bullets were left
    out unverified by VERIFY strict)."""
    fields: list[Field] = []
    for number, support in enumerate(supports, 1):
        if support is None:
            fields.append(("UNVERIFIED", str(number)))
        else:
            fields.append(("QUOTE", quote_line(number, *support)))
    verified = sum(support is not None for support in supports)
    unverified = len(supports) - verified + dropped
    return [*fields, ("VERIFIED", str(verified)), ("UNVERIFIED_COUNT", str(unverified))]
