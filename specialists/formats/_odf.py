"""An OpenDocument text's ``content.xml`` as simple HTML, for the extractor to render.

Covers what reads as Markdown: headings (``text:h`` and its outline level), paragraphs,
lists (ordered when the list style numbers that level), tables (blank repeated cells
within bounds), links, line breaks and spaces, text boxes; notes are gathered at the end. Tracked
deletions, annotations and images are left out. Nesting past ``MAX_DEPTH`` is kept as flat
text, so a hostile file cannot exhaust the stack.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from html import escape

from ._xml import local

TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
TABLE = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
STYLE = "urn:oasis:names:tc:opendocument:xmlns:style:1.0"
XLINK = "http://www.w3.org/1999/xlink"
MAX_DEPTH = 100  # real documents nest a few dozen levels at most (lists in tables in frames)
MAX_REPEAT = 100  # a repeated cell or space past this is padding, not content
_SKIPPED = frozenset({"tracked-changes", "annotation", "note-citation", "sequence-decls"})
_SKIPPED |= frozenset({"table-columns", "table-column", "soft-page-break"})


def odt_html(content: ET.Element, styles: ET.Element | None = None) -> str:
    """The body of an ODT's ``content.xml`` root as HTML (``styles``: its ``styles.xml``
    root, where named list styles live)."""
    writer = _Writer(_numbered_levels(content, styles))
    body = content.find(f"{{{OFFICE}}}body/{{{OFFICE}}}text")
    if body is not None:
        writer.children(body, 0)
    return writer.html()


def _numbered_levels(*roots: ET.Element | None) -> dict[str, set[int]]:
    """Each list style's name and the levels it numbers (the rest are bulleted)."""
    numbered: dict[str, set[int]] = {}
    for root in roots:
        if root is None:
            continue
        for style in root.iter(f"{{{TEXT}}}list-style"):
            levels = numbered.setdefault(style.get(f"{{{STYLE}}}name", ""), set())
            for level in style.iter(f"{{{TEXT}}}list-level-style-number"):
                levels.add(_int(level.get(f"{{{TEXT}}}level"), 1))
    return numbered


def _int(value: str | None, default: int) -> int:
    """A count attribute's value (huge ones as 10**18: callers clamp), else ``default``."""
    if value is None or not value.isascii() or not value.isdecimal():
        return default
    return int(value) if len(value) <= 18 else 10**18


class _Writer:
    def __init__(self, numbered: dict[str, set[int]]) -> None:
        self.numbered = numbered
        self.out: list[str] = []
        self.notes: list[str] = []
        self.lists: list[str] = []  # the style name of each open list, outermost first

    def html(self) -> str:
        if self.notes:
            self.out.append("<h2>Notes</h2><ol>" + "".join(self.notes) + "</ol>")
        return "".join(self.out)

    def children(self, element: ET.Element, depth: int) -> None:
        if element.text:
            self.out.append(escape(element.text))
        for kid in element:
            self.element(kid, depth + 1)
            if kid.tail:
                self.out.append(escape(kid.tail))

    def element(self, element: ET.Element, depth: int) -> None:
        name = local(element.tag) if isinstance(element.tag, str) else ""
        if name in _SKIPPED or name in ("", "image", "deletion"):
            return
        if depth > MAX_DEPTH:
            self.out.append(escape(" ".join("".join(element.itertext()).split())) + " ")
            return
        handler = _HANDLERS.get(name)
        if handler is None:
            self.children(element, depth)
        else:
            handler(self, element, depth)

    def wrap(self, tag: str, element: ET.Element, depth: int, attrs: str = "") -> None:
        self.out.append(f"<{tag}{attrs}>")
        self.children(element, depth)
        self.out.append(f"</{tag}>")

    def heading(self, element: ET.Element, depth: int) -> None:
        level = min(max(_int(element.get(f"{{{TEXT}}}outline-level"), 1), 1), 6)
        self.wrap(f"h{level}", element, depth)

    def paragraph(self, element: ET.Element, depth: int) -> None:
        self.wrap("p", element, depth)

    def link(self, element: ET.Element, depth: int) -> None:
        href = element.get(f"{{{XLINK}}}href") or ""
        self.wrap("a", element, depth, f' href="{escape(href)}"')

    def spaces(self, element: ET.Element, depth: int) -> None:
        self.out.append(" " * min(_int(element.get(f"{{{TEXT}}}c"), 1), MAX_REPEAT))

    def line_break(self, element: ET.Element, depth: int) -> None:
        self.out.append("<br>")

    def tab(self, element: ET.Element, depth: int) -> None:
        self.out.append(" ")

    def list(self, element: ET.Element, depth: int) -> None:
        style = element.get(f"{{{TEXT}}}style-name") or (self.lists[-1] if self.lists else "")
        self.lists.append(style)
        ordered = len(self.lists) in self.numbered.get(style, set())
        tag = "ol" if ordered else "ul"
        self.wrap(tag, element, depth)
        self.lists.pop()

    def item(self, element: ET.Element, depth: int) -> None:
        self.wrap("li", element, depth)

    def table(self, element: ET.Element, depth: int) -> None:
        self.wrap("table", element, depth)

    def row(self, element: ET.Element, depth: int) -> None:
        self.wrap("tr", element, depth)  # a repeated row is blank filler to the table's end

    def cell(self, element: ET.Element, depth: int) -> None:
        if "".join(element.itertext()).strip():
            self.wrap("td", element, depth)
            return
        # Blank cells repeat to keep the columns in line; content is never repeated, so a
        # cell repeated inside a repeated cell cannot multiply the work.
        repeat = min(_int(element.get(f"{{{TABLE}}}number-columns-repeated"), 1), MAX_REPEAT)
        self.out.append("<td></td>" * repeat)

    def note(self, element: ET.Element, depth: int) -> None:
        body = element.find(f"{{{TEXT}}}note-body")
        if body is None:
            return
        outer, self.out = self.out, []
        self.children(body, depth)
        self.notes.append("<li>" + "".join(self.out) + "</li>")
        self.out = outer


_HANDLERS = {
    "h": _Writer.heading,
    "p": _Writer.paragraph,
    "a": _Writer.link,
    "s": _Writer.spaces,
    "line-break": _Writer.line_break,
    "tab": _Writer.tab,
    "list": _Writer.list,
    "list-item": _Writer.item,
    "list-header": _Writer.item,
    "table": _Writer.table,
    "table-row": _Writer.row,
    "table-cell": _Writer.cell,
    "covered-table-cell": _Writer.cell,
    "note": _Writer.note,
}
