"""Input defusing before parsing: keep pathological nesting from costing seconds.

lexbor checks the whole stack of open elements for every block start tag ("has a p element
in button scope"), so n nested <div>s cost O(n²): 100,000 of them take about 12 s. Browsers
cap the tree instead (Blink's kMaximumHTMLParserDOMTreeDepth is 512); here container tags
nested deeper than that are renamed to <span>, which the parser nests in linear time.
"""

from __future__ import annotations

import re

NESTING_LIMIT = 512  # Blink's tree-depth cap
# Pages below this many '<' cannot nest deep enough to be slow (12,000² stack steps take
# about 0.1 s), so they skip the scan; the dev corpus's largest page has about 3,200.
SCAN_ABOVE_TAGS = 12_000

_CONTAINER = re.compile(
    r"<(/?)(div|section|article|main|aside|header|footer|nav|ul|ol|dl|blockquote|form|"
    r"fieldset|figure|figcaption|details|summary|center|address|dialog|hgroup|menu|dir|search|"
    r"pre|listing)"
    r"(?=[\s/>])",
    re.IGNORECASE,
)


def defuse_nesting(html: str) -> str:
    """`html` with container tags deeper than NESTING_LIMIT renamed to span; else unchanged.

    Tags that browsers close implicitly (p, li, dd, dt) are not counted, so unclosed
    paragraphs never look deep. Never raises.
    """
    if html.count("<") <= SCAN_ABOVE_TAGS:
        return html
    cuts: list[tuple[int, int]] = []
    depth = 0
    for match in _CONTAINER.finditer(html):
        closing = bool(match.group(1))
        depth += 0 if closing else 1
        if depth > NESTING_LIMIT:
            cuts.append(match.span(2))
        if closing:
            depth = max(0, depth - 1)
    return _rename(html, cuts) if cuts else html


def _rename(html: str, cuts: list[tuple[int, int]]) -> str:
    pieces: list[str] = []
    start = 0
    for begin, end in cuts:
        pieces.append(html[start:begin])
        pieces.append("span")
        start = end
    pieces.append(html[start:])
    return "".join(pieces)
