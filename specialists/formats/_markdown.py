"""Markdown pieces the readers share: a bounded join of blocks, table cells, link labels."""

from __future__ import annotations

import re

_SPECIAL = re.compile(r"[|\r\n\t\f\v\u00a0]|  ")
_PIPE_OR_BACKSLASH = re.compile(r"\\(?=\\*\|)|\|")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_SPACES = re.compile(r"[ \t\f\v\u00a0]+")
_MARKUP_START = re.compile(r"#|>|\||[-+*=]+(\s|$)")
_ORDERED_START = re.compile(r"\d+(?=[.)](\s|$))")
# [ ] <, and a backslash run before one or at the end (it would eat an escape or what follows)
_LINK_MARKUP = re.compile(r"\\(?=\\*(?:[\[\]<]|$))|[\[\]<]")


def fit(blocks: list[str], max_chars: int) -> tuple[str, bool]:
    """``blocks`` joined by blank lines, at most ``max_chars`` long, and whether any was cut.

    Whole blocks are kept while they fit; of the first that does not, its whole lines that
    fit (a table's first rows), or its first characters when not one line does.
    """
    kept: list[str] = []
    size = 0
    for block in blocks:
        gap = 2 if kept else 0
        if size + gap + len(block) > max_chars:
            room = max_chars - size - gap
            head = _lines_within(block, room) if room > 0 else ""
            return "\n\n".join([*kept, head] if head else kept), True
        kept.append(block)
        size += gap + len(block)
    return "\n\n".join(kept), False


def _lines_within(block: str, room: int) -> str:
    """The longest run of ``block``'s first whole lines within ``room`` characters, else its
    first ``room`` characters."""
    end = block.rfind("\n", 0, room + 1)
    return block[:end].rstrip("\n") if end > 0 else block[:room]


def inert(text: str) -> str:
    """``text`` that Markdown shows as written and never reads as a link, an autolink or
    raw HTML: ``[``, ``]`` and ``<`` backslashed, and a backslash before them or at the end
    doubled (it must escape nothing: what follows may be a link's closing bracket or a
    ``<br>``). A document's text may hold ``[x](javascript:...)`` or ``<javascript:...>``; only
    a reader's own links, made of an http(s) URL, are links."""
    return _LINK_MARKUP.sub(r"\\\g<0>", text)


def cell(text: str) -> str:
    """``text`` as one GFM table cell: ``inert``, pipes escaped (with a backslash that would
    eat the escape doubled), line breaks as ``<br>``, runs of spaces collapsed."""
    if not _SPECIAL.search(text):  # most cells: a word or a number, nothing to escape
        return inert(text.strip())
    escaped = _PIPE_OR_BACKSLASH.sub(lambda m: "\\\\" if m.group() == "\\" else "\\|", text)
    lines = (inert(_SPACES.sub(" ", line).strip()) for line in _LINE_BREAK.split(escaped.strip()))
    return "<br>".join(line for line in lines if line)


def left_out(count: int, nouns: tuple[str, str], limit: str, value: int) -> str:
    """The line under a list or table cut at a limit: ``_(3 more rows left out: max_rows 10)_``
    (``nouns``: the singular and the plural)."""
    return f"_({count} more {nouns[count != 1]} left out: {limit} {value})_"


def label(text: str) -> str:
    """``text`` on one line as a link label: brackets, which would end the label, become
    parentheses; ``inert`` (a ``<`` opens no autolink, a last backslash eats no bracket)."""
    return inert(" ".join(text.split()).replace("[", "(").replace("]", ")"))


def target(url: str) -> str:
    """``url`` safe inside a Markdown link's parentheses (spaces and parentheses encoded)."""
    return url.strip().replace(" ", "%20").replace("(", "%28").replace(")", "%29")


def escape_start(line: str) -> str:
    """Backslash a line start that Markdown would read as a heading, list item, quote or
    table row."""
    if _MARKUP_START.match(line):
        return "\\" + line
    number = _ORDERED_START.match(line)
    return f"{line[: number.end()]}\\{line[number.end() :]}" if number else line
