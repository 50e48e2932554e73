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
- in Markdown text only (``fold(markdown=True)``: an HTML page's or a document's stored
  text), markup reads as the text it marks: emphasis and code marks (``*``, ``_``, a
  backtick) where they delimit (not between two letters or digits) and backslash escapes
  are dropped, a link ``[words](url)`` reads as ``words``, an image as nothing, and a
  heading, list or blockquote marker at a line's start as nothing. So a quote may run
  across a link or emphasis; its span then holds the markup too.

A quote is folded as plain text: its ``#`` or ``>`` is a character it claims. Letter case,
digits and other punctuation must match as they are. A match begins and ends on a character
of the stored text that the quote's first and last characters stand for, never inside a
folded one. ``supports`` says whether a model's quote could hold a bullet at all.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import re
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from protocol import Field

# Markup and spellings that fold (see the module docstring). The lookahead lets an ordinary
# character fail at once (bench/verify.py: 5x faster than trying each alternative at each
# position); a plain single space is copied with the text around it. No pattern scans past
# a character that starts another match of itself (a bracket, a parenthesis), so folding is
# linear however a page nests or repeats ``[``, ``![`` and ``](`` (bench/verify.py --crafted).
_MARKER = r"[ \t]*(?:#{1,6}[ \t]+|>[ \t>]*|(?:[-*+•]|\d{1,3}[.)])[ \t]+)"
_SPELLINGS = "‘’‚‛′“”„‟″«»‐‑‒–—―−…"
_INVISIBLE = r"\u00ad\u200b-\u200d\u2060\ufeff"
_MARKDOWN = re.compile(
    rf"(?=\A|[^\S ]|  |[!\[\]*_`\\{_INVISIBLE}{_SPELLINGS}])"
    rf"(?:(?P<marker>\A{_MARKER})"
    rf"|(?P<space>[^\S\n]*\n(?:{_MARKER})?|[^\S\n]{{2,}}|[^\S ])"
    r"|(?P<image>!\[[^\[\]\n]*\]\([^()\n]*\))"
    r"|(?P<open>\[(?=[^\[\]\n]*\]\([^()\n]*\)))"
    r"|(?P<close>\]\([^()\]\n]*\))"
    # emphasis and code marks only as delimiters: ``10*5`` and ``x_1`` keep theirs
    r"|(?P<markup>(?<![^\W_])[*_`]++|[*_`]++(?![^\W_])|\\(?=[!-/:-@\[-`{-~])"
    rf"|[{_INVISIBLE}])"
    rf"|(?P<fold>[{_SPELLINGS}]))"
)
# Text that is not Markdown (text/plain, JSON, a TEXT given) and every quote: whitespace,
# invisible characters and spellings fold; a ``*``, ``#`` or ``[`` is a character like any.
_PLAIN = re.compile(
    rf"(?=[^\S ]|  |[{_INVISIBLE}{_SPELLINGS}])"
    rf"(?:(?P<space>[^\S ][^\S]*|  [^\S]*)|(?P<markup>[{_INVISIBLE}])|(?P<fold>[{_SPELLINGS}]))"
)
_FOLDS = (
    {c: "'" for c in "‘’‚‛′"}
    | {c: '"' for c in "“”„‟″«»"}
    | {c: "-" for c in "‐‑‒–—―−"}
    | {"…": "..."}
)
_RAW_UNSAFE = re.compile(r"[\x7f-\x9f\u2028\u2029]")  # raw in JSON, not on a CSP/1 line (F-5)
MAX_OCCURRENCES = 1000  # how many matches of one quote are weighed against a given offset
# The longest span a QUOTE line shows, and so the longest quote a model may claim (a longer
# one is UNVERIFIED, never cut: its tail would go unchecked); the markup between a quote's
# words (link targets, emphasis) may make the span longer than the quote.
SHOWN_SPAN_CHARS = 2000
# The longest stored text folded (code points): a document may hold 5,000,000, and folding
# costs CPU time and memory in proportion; a quote past this prefix is not found.
MAX_FOLDED_CHARS = 5_000_000
# What a model's quote must hold to support a bullet: this many words or characters (folded),
# unless the bullet itself is shorter, and this many of the bullet's content words (a word
# read by its first STEM_CHARS letters: "wind" and "winds", "surge" and "surges" are one).
MIN_QUOTE_WORDS = 4
MIN_QUOTE_CHARS = 20
MIN_SHARED_WORDS = 1
STEM_CHARS = 4
_WORD = re.compile(r"\w+")
_STOPWORD_LIST = """a an and are as at be been but by for from had has have he her his i if in
    into is it
    its not of on or our she so than that the their them then there these they this those to
    was we were what when which who will with you your"""
_STOPWORDS = frozenset(_STOPWORD_LIST.split())


@dataclass(frozen=True)
class Span:
    """Where a quote stands in a stored text: ``text == stored[start:end]``."""

    start: int
    end: int
    sha256: str
    text: str


class Folded:
    """A text folded for matching, with the map from each folded character back to the
    characters of the original it stands for.

    Only the folded (not copied) runs are recorded, four integers each in arrays: where the
    run starts in the folded text and how long it is there, and the original range it
    stands for. A copied character maps by its distance from the run before it."""

    def __init__(self, original: str, *, markdown: bool = True) -> None:
        self.original = original
        self._folded_at = array("q")  # folded start of each folded run
        self._folded_len = array("q")  # its length in the folded text (0: dropped)
        self._original_start = array("q")
        self._original_end = array("q")
        parts: list[str] = []
        self._size = 0
        position = 0
        tokens = _MARKDOWN if markdown else _PLAIN
        for match in tokens.finditer(original):
            self._copy(parts, position, match.start())
            self._token(parts, match)
            position = match.end()
        self._copy(parts, position, len(original))
        self.text = "".join(parts)

    def _copy(self, parts: list[str], start: int, end: int) -> None:
        if start < end and self.original[start] == " " and self._after_space(parts):
            self._record(parts, "", start, start + 1)  # runs of spaces stay one
            start += 1
        if start < end:
            parts.append(self.original[start:end])
            self._size += end - start

    def _token(self, parts: list[str], match: re.Match[str]) -> None:
        kind, start, end = match.lastgroup, match.start(), match.end()
        if kind == "space" and not self._after_space(parts):
            self._record(parts, " ", start, end)
        elif kind == "fold":
            self._record(parts, _FOLDS[match.group()], start, end)
        else:
            self._record(parts, "", start, end)

    def _after_space(self, parts: list[str]) -> bool:
        return self._size == 0 or parts[-1].endswith(" ")

    def _record(self, parts: list[str], text: str, start: int, end: int) -> None:
        if text:
            parts.append(text)
        self._folded_at.append(self._size)
        self._folded_len.append(len(text))
        self._original_start.append(start)
        self._original_end.append(end)
        self._size += len(text)

    def original_range(self, start: int, end: int) -> tuple[int, int] | None:
        """The original's ``[start, end)`` that folded ``[start, end)`` (non-empty) stands
        for, or None when either end cuts a folded run (``..`` of the ``...`` an ``…``
        reads as does not stand for a character of the original)."""
        first, last = self._run(start), self._run(end - 1)
        if first is not None and start != self._folded_at[first]:
            return None
        if last is not None and end != self._folded_at[last] + self._folded_len[last]:
            return None
        return self._original_at(start, first, True), self._original_at(end - 1, last, False)

    def _run(self, index: int) -> int | None:
        """The folded run holding folded character ``index``, if one does."""
        run = bisect.bisect_right(self._folded_at, index) - 1
        if run >= 0 and index < self._folded_at[run] + self._folded_len[run]:
            return run
        return None

    def _original_at(self, index: int, run: int | None, first: bool) -> int:
        if run is not None:
            return self._original_start[run] if first else self._original_end[run]
        before = bisect.bisect_right(self._folded_at, index) - 1
        if before < 0:
            return index + (0 if first else 1)
        copied_from = self._folded_at[before] + self._folded_len[before]
        return self._original_end[before] + index - copied_from + (0 if first else 1)

    def folded_index(self, offset: int) -> int | None:
        """Where original ``offset`` stands in the folded text, or None when it falls inside
        a folded run (not on a character the folded text copies or begins a run with)."""
        run = bisect.bisect_right(self._original_start, offset) - 1
        if run < 0:
            return offset
        if offset < self._original_end[run]:
            return self._folded_at[run] if offset == self._original_start[run] else None
        return self._folded_at[run] + self._folded_len[run] + offset - self._original_end[run]


def fold(text: str, *, markdown: bool = True) -> Folded:
    """``text`` (at most its first MAX_FOLDED_CHARS) folded for ``locate``; O(len(text)),
    done once per stored text. ``markdown``: the text is Markdown (an HTML page's or a
    document's stored text), so its markup reads as the words it marks."""
    return Folded(text[:MAX_FOLDED_CHARS], markdown=markdown)


def folded_quote(quote: str) -> str:
    """What ``quote`` must match in a folded text: folded as plain text (a quote's ``#`` or
    ``*`` is a character it claims), without edge spaces."""
    return Folded(quote, markdown=False).text.strip(" ")


def supports(quote: str, bullet: str) -> bool:
    """Whether a model's ``quote`` could be the support of ``bullet`` before it is looked
    for: at most SHOWN_SPAN_CHARS long; at least MIN_QUOTE_WORDS words or MIN_QUOTE_CHARS
    characters once folded (or as many as the bullet has); and sharing MIN_SHARED_WORDS of
    the bullet's content words (or all it has). So ``"The"`` or ``"."`` supports nothing.
    A check of form, not of meaning: a quote sharing a word may still not say the bullet."""
    if len(quote) > SHOWN_SPAN_CHARS:
        return False
    needle, claim = folded_quote(quote), folded_quote(bullet)
    words, claim_words = _WORD.findall(needle), _WORD.findall(claim)
    long_enough = len(words) >= min(MIN_QUOTE_WORDS, len(claim_words)) or len(needle) >= min(
        MIN_QUOTE_CHARS, len(claim)
    )
    content = _content(claim_words)
    shared = content & _content(words)
    return (
        holds_words(needle) and long_enough and len(shared) >= min(MIN_SHARED_WORDS, len(content))
    )


def _content(words: list[str]) -> set[str]:
    """The stems of the words that carry a claim: not stopwords, numbers whole (``105`` is
    content, and not ``1050``)."""
    lowered = (word.casefold() for word in words)
    return {
        word if word.isdigit() else word[:STEM_CHARS]
        for word in lowered
        if word not in _STOPWORDS and (len(word) > 1 or word.isdigit())
    }


def holds_words(quote: str) -> bool:
    """Whether ``quote`` holds a letter or digit (``**`` or ``.`` claims no words)."""
    return _WORD.search(quote) is not None


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


def located_at(folded: Folded, quote: str, start: int) -> Span | None:
    """The span of ``quote`` when it begins at original offset ``start``, else None: one
    comparison, however often the quote occurs elsewhere (MAX_OCCURRENCES)."""
    needle, at = folded_quote(quote), folded.folded_index(start)
    if not needle or at is None or not folded.text.startswith(needle, at):
        return None
    where = folded.original_range(at, at + len(needle))
    if where is None or where[0] != start:
        return None
    return span_of(folded.original, *where)


def _matches(folded: Folded, needle: str) -> Iterator[tuple[int, int]]:
    at = folded.text.find(needle)
    for _ in range(MAX_OCCURRENCES):
        if at < 0:
            return
        where = folded.original_range(at, at + len(needle))
        if where is not None:
            yield where
        at = folded.text.find(needle, at + 1)


def locate_all(
    stored: str, claims: Sequence[tuple[str, str]], *, markdown: bool
) -> list[Span | None]:
    """For each (bullet, quote), the quote's first span in ``stored`` of at most
    SHOWN_SPAN_CHARS, or None where it is not there or does not support the bullet
    (``supports``); ``stored`` is folded once (``fold``). CPU-bound: callers run it in a
    worker thread."""
    folded = fold(stored, markdown=markdown)
    return [support_span(folded, bullet, quote) for bullet, quote in claims]


def support_span(folded: Folded, bullet: str, quote: str) -> Span | None:
    """The span of ``quote`` in ``folded`` when it supports ``bullet``: the check summarize
    and research share."""
    if not supports(quote, bullet):
        return None
    return locate(folded, quote, max_span_chars=SHOWN_SPAN_CHARS)


def is_markdown(kind: str) -> bool:
    """Whether a page of ``kind`` is stored as Markdown (HTML and documents are; text/plain
    and JSON are stored as decoded)."""
    return kind in ("html", "document")


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
