"""`document_markdown`: every block of a body as Markdown, with no content selection.

A page's HTML holds chrome around an article, which `extract_article` finds and prunes. A
document converted to HTML (a DOCX through mammoth, an ODT) is content from end to end: it is
rendered whole, with the same Markdown renderer, so headings, lists, tables and links read
the same as a page's.
"""

from __future__ import annotations

from selectolax.lexbor import LexborHTMLParser

from ._dom import build_tree
from ._guard import defuse_nesting
from ._markdown import render


def document_markdown(html: str, *, url: str | None = None) -> str:
    """The Markdown of all of `html`'s body, links made absolute against `url` (http/https
    only; without `url` relative links are dropped). Pure; empty when the body is."""
    body = LexborHTMLParser(defuse_nesting(html)).body
    if body is None:
        return ""
    root, _ = build_tree(body)
    return "\n\n".join(render([root], base_url=url, skip=frozenset()))
