"""Rendering of selected `Elem`s as Markdown: headings, paragraphs, lists, links, tables,
blockquotes and fenced code. Emphasis is not rendered: a marker glued inside a word
(`<b>S</b>ome`) would split it in two for any reader that tokenises the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ._dom import Elem, text_of
from ._hints import BLOCK_TAGS, HEADINGS
from ._rules import REPEATED_PARAGRAPHS, on
from ._urls import resolve_link

REPEAT_MIN_CHARS = 200  # shorter ones (a greeting, a sign-off, a short quote) may rightly repeat
_BR = "\x00"  # marks a <br> inside inline text until whitespace is collapsed
_LIST_TAGS = frozenset({"ul", "ol", "dir", "menu"})
_SKIPPED_TAGS = frozenset({"figcaption", "hr", "caption"})
_MARKUP_STARTS = frozenset("#>-+*=0123456789")
_ORDERED_MARKER = re.compile(r"\d+(?=[.)](\s|$))")
_OTHER_MARKER = re.compile(r"#|>|[-+*=]+(\s|$)")


def render(elems: Iterable[Elem], *, base_url: str | None, skip: frozenset[int]) -> list[str]:
    """Markdown blocks of `elems` in order; elements whose id() is in `skip` are left out."""
    renderer = _Renderer(base_url, skip)
    out: list[str] = []
    for elem in elems:
        out.extend(renderer.blocks(elem))
    return out


class _Renderer:
    def __init__(self, base_url: str | None, skip: frozenset[int]) -> None:
        self.base_url = base_url
        self.skip = skip
        self.seen: set[str] = set()  # long paragraphs already written

    def blocks(self, elem: Elem) -> list[str]:
        """The Markdown blocks of one element, dispatched on its tag."""
        tag = elem.tag
        if tag in _SKIPPED_TAGS or id(elem) in self.skip:
            return []
        if tag in HEADINGS:
            return self._heading(elem)
        if tag in _LIST_TAGS:
            return self._list(elem)
        if tag == "pre":
            return _fence(text_of(elem))
        if tag == "table":
            return self._table(elem)
        if tag == "blockquote":
            return _quote(self.flow(elem))
        return self.flow(elem)

    def flow(self, elem: Elem) -> list[str]:
        """Blocks of a container: each run of inline content between blocks is a paragraph."""
        out: list[str] = []
        run: list[str] = []
        for kid in elem.kids:
            if isinstance(kid, str):
                run.append(kid)
            elif id(kid) in self.skip:
                continue
            elif kid.tag in BLOCK_TAGS or kid.blocky:
                self._paragraphs(run, out)
                out.extend(self.blocks(kid))
            else:
                run.append(self.inline(kid))
        self._paragraphs(run, out)
        return out

    def _paragraphs(self, run: list[str], out: list[str]) -> None:
        """`_flush` without repeats: a long paragraph written before (a post quoted whole, a
        block served twice for two screen sizes) is written once."""
        if not run:  # between two blocks
            return
        fresh: list[str] = []
        _flush(run, fresh)
        for paragraph in fresh:
            if len(paragraph) >= REPEAT_MIN_CHARS:
                if paragraph in self.seen and on(REPEATED_PARAGRAPHS):
                    continue
                self.seen.add(paragraph)
            out.append(paragraph)

    def inline(self, elem: Elem) -> str:
        """Inline text of an element: links become `[text](url)`, `<br>` a line break."""
        tag = elem.tag
        if tag == "br":
            return _BR
        text = "".join(
            kid if isinstance(kid, str) else self.inline(kid)
            for kid in elem.kids
            if isinstance(kid, str) or self._renders(kid)
        )
        if tag == "a":
            return self._link(elem, text)
        if tag == "code" and text.strip() and "`" not in text:
            return _around(text, "`")
        return text

    def _renders(self, elem: Elem) -> bool:
        return id(elem) not in self.skip and elem.tag not in _SKIPPED_TAGS

    def _link(self, elem: Elem, text: str) -> str:
        label = " ".join(text.replace(_BR, " ").split())
        if not label:  # an icon or image link: nothing to write a target for
            return text
        target = resolve_link(elem.attrs.get("href"), self.base_url)
        if target is None:
            return text
        label = label.replace("[", "(").replace("]", ")")
        return _around(text, f"[{label}]({target})", replace=True)

    def _heading(self, elem: Elem) -> list[str]:
        text = _collapse(" ".join(self.flow(elem)))
        return [f"{'#' * int(elem.tag[1])} {text}"] if text else []

    def _list(self, elem: Elem) -> list[str]:
        items: list[str] = []
        number = 0
        for kid in elem.kids:
            if isinstance(kid, str) or id(kid) in self.skip:
                continue
            if kid.tag != "li":
                items.extend(self.blocks(kid))
                continue
            number += 1
            marker = f"{number}. " if elem.tag == "ol" else "- "
            body = "\n\n".join(self.flow(kid))
            if body:
                items.append(marker + body.replace("\n", "\n" + " " * len(marker)))
        return ["\n".join(items)] if items else []

    def _table(self, elem: Elem) -> list[str]:
        rows = list(_rows(elem))
        width = max((len(cells) for cells in rows), default=0)
        if width < 2 or _has_table_inside(elem):
            return [block for cells in rows for cell in cells for block in self.flow(cell)]
        lines = []
        for cells in rows:
            texts = [_cell_text(self.flow(cell)) for cell in cells]
            if any(texts):
                texts += [""] * (width - len(texts))
                lines.append("| " + " | ".join(texts) + " |")
        if not lines:
            return []
        lines.insert(1, "|" + " --- |" * width)
        return ["\n".join(lines)]


def _around(text: str, core: str, *, replace: bool = False) -> str:
    """`core` (or `text` wrapped in the marker `core`) keeping `text`'s outer whitespace."""
    stripped = text.strip()
    inner = core if replace else f"{core}{stripped}{core}"
    lead = " " if text[:1].isspace() else ""
    trail = " " if text[-1:].isspace() else ""
    return f"{lead}{inner}{trail}"


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _flush(run: list[str], out: list[str]) -> None:
    """Turn a run of inline text into paragraphs: one <br> breaks a line, two a paragraph."""
    if not run:
        return
    lines: list[str] = []
    for line in "".join(run).split(_BR):
        line = _collapse(line)
        if line:
            lines.append(_escape_start(line))
        elif lines:
            out.append("\n".join(lines))
            lines = []
    if lines:
        out.append("\n".join(lines))
    run.clear()


def _escape_start(line: str) -> str:
    """Backslash a line start that Markdown would read as a heading, list item or quote."""
    if line[0] not in _MARKUP_STARTS:
        return line
    number = _ORDERED_MARKER.match(line)
    if number is not None:  # "1. x" escapes as "1\. x"
        return f"{line[: number.end()]}\\{line[number.end() :]}"
    return "\\" + line if _OTHER_MARKER.match(line) else line


def _fence(code: str) -> list[str]:
    code = code.strip("\n")
    if not code.strip():
        return []
    fence = "```"
    while fence in code:
        fence += "`"
    return [f"{fence}\n{code}\n{fence}"]


def _quote(blocks: list[str]) -> list[str]:
    if not blocks:
        return []
    text = "\n\n".join(blocks)
    return ["\n".join(f"> {line}" if line else ">" for line in text.split("\n"))]


def _rows(table: Elem) -> Iterable[list[Elem]]:
    for kid in table.kids:
        if isinstance(kid, str):
            continue
        if kid.tag == "tr":
            yield [c for c in kid.kids if isinstance(c, Elem) and c.tag in ("td", "th")]
        elif kid.tag in ("thead", "tbody", "tfoot"):
            yield from _rows(kid)


def _has_table_inside(table: Elem) -> bool:
    stack = [k for k in table.kids if isinstance(k, Elem)]
    while stack:
        node = stack.pop()
        if node.tag == "table":
            return True
        stack.extend(k for k in node.kids if isinstance(k, Elem))
    return False


def _cell_text(blocks: list[str]) -> str:
    return _collapse(" ".join(blocks)).replace("|", "\\|")
