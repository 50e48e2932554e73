"""`outline`: a compact, tag-free map of a page's structure for the EXTRACT html mode.

One line per landmark or content block, indented by landmark nesting::

    title: Example page
    header
      nav: 12 links
    main
      h1: Example headline
      p: The first eighty characters of the paragraph…
      table: 3x4
      form: 2 inputs
"""

from __future__ import annotations

from selectolax.lexbor import LexborHTMLParser, LexborNode

from ._guard import defuse_nesting

PREVIEW_CHARS = 80  # a paragraph is previewed, never copied whole
MAX_INDENT_LEVELS = 12  # deeper landmarks keep the last indent so lines stay readable

_LANDMARKS = frozenset({"header", "nav", "main", "article", "section", "aside", "footer"})
_SKIPPED = frozenset({"script", "style", "noscript", "template", "svg", "head", "iframe"})
_TEXT_BLOCKS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6", "p", "blockquote", "figcaption"})
_INPUTS = "input:not([type=hidden]), select, textarea, button"


def outline(html: str, *, max_items: int = 200) -> str:
    """The page's outline as indented lines, at most `max_items` of them plus a count of the
    rest. Text is previewed, never copied whole, and holds no markup ('<' is shown as '‹').
    Pure; never raises (an unreadable page yields an empty string).
    """
    if not isinstance(html, str) or not html.strip() or max_items <= 0:
        return ""
    try:
        tree = LexborHTMLParser(defuse_nesting(html))
    except Exception:  # the outline is advisory; a parser edge case must not fail the op
        return ""
    return tree_outline(tree, max_items=max_items)


def tree_outline(tree: LexborHTMLParser, *, max_items: int = 200) -> str:
    """`outline` of a page already parsed (as `outline` parses it); reads `tree`, never
    changes it. Never raises."""
    try:
        lines = _title_line(tree) + _body_lines(tree.body)
    except Exception:  # the outline is advisory; a parser edge case must not fail the op
        return ""
    if len(lines) > max_items:
        lines = [*lines[:max_items], f"… {len(lines) - max_items} more"]
    return "\n".join(lines)


def _title_line(tree: LexborHTMLParser) -> list[str]:
    node = tree.css_first("head > title")
    title = _preview(node.text()) if node is not None else ""
    return [f"title: {title}"] if title else []


def _body_lines(body: LexborNode | None) -> list[str]:
    if body is None:
        return []
    lines: list[str] = []
    stack: list[tuple[LexborNode, int]] = [(child, 0) for child in _children(body)]
    while stack:
        node, level = stack.pop()
        line = _describe(node)
        indent = "  " * min(level, MAX_INDENT_LEVELS)
        if line:
            lines.append(indent + line)
        if node.tag in _LANDMARKS:
            stack.extend((child, level + 1) for child in _children(node))
        elif not line:
            stack.extend((child, level) for child in _children(node))
    return lines


def _children(node: LexborNode) -> list[LexborNode]:
    """Element children, reversed so that popping the stack yields document order."""
    kids = [child for child in node.iter() if child.tag not in _SKIPPED]
    kids.reverse()
    return kids


def _describe(node: LexborNode) -> str:
    """One line for a block or landmark; '' for a wrapper whose children speak instead."""
    tag = node.tag or ""
    if tag in _LANDMARKS:
        return _landmark(node, tag)
    if tag in _TEXT_BLOCKS:
        text = _preview(node.text(separator=" "))
        return f"{tag}: {text}" if text else ""
    if tag in ("ul", "ol", "dl"):
        items = sum(1 for child in node.iter() if child.tag in ("li", "dt"))
        return f"{tag}: {items} items, {len(node.css('a'))} links"
    if tag == "table":
        return f"table: {_table_shape(node)}"
    if tag == "form":
        return f"form: {len(node.css(_INPUTS))} inputs"
    if tag == "pre":
        return f"pre: {node.text().count(chr(10)) + 1} lines"
    if tag in ("img", "video", "audio"):
        alt = _preview(node.attributes.get("alt") or "")
        return f"{tag}: {alt}" if alt else tag
    return ""


def _landmark(node: LexborNode, tag: str) -> str:
    if tag == "nav":
        return f"nav: {len(node.css('a'))} links"
    label = node.attributes.get("aria-label") or node.attributes.get("id") or ""
    return f"{tag}: {_preview(label)}" if label else tag


def _table_shape(table: LexborNode) -> str:
    rows = table.css("tr")
    columns = max((sum(1 for c in row.iter() if c.tag in ("td", "th")) for row in rows), default=0)
    return f"{len(rows)}x{columns}"


def _preview(text: str) -> str:
    text = " ".join(text.split()).replace("<", "‹").replace(">", "›")
    if len(text) <= PREVIEW_CHARS:
        return text
    return text[:PREVIEW_CHARS].rstrip() + "…"
