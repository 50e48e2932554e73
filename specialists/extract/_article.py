"""`extract_article`: parse, then run the extraction passes (`_passes.PASSES`) over the page."""

from __future__ import annotations

from dataclasses import dataclass

from selectolax.lexbor import LexborHTMLParser

from ._guard import defuse_nesting
from ._outline import tree_outline
from ._page import Page
from ._passes import run_passes


@dataclass(frozen=True)
class Article:
    """The readable part of a page.

    `markdown` starts with a `# Title` line when a title is known, then the main content;
    `word_count` counts the `\\w+` runs of the content without the title or link targets;
    `page_type` is one of `PAGE_TYPES` when the page says clearly what it is, else None.
    """

    title: str | None
    markdown: str
    description: str | None
    word_count: int
    page_type: str | None = None


EMPTY = Article(title=None, markdown="", description=None, word_count=0)


def extract_article(html: str, *, url: str | None = None) -> Article:
    """The article in `html`, with links made absolute against `url` (http/https only).

    Pure and deterministic. Never raises: on input it cannot read it returns an Article
    with empty markdown.
    """
    if not isinstance(html, str) or not html.strip():
        return EMPTY
    try:
        return _extract(html, url)
    except Exception:  # a parser edge case must cost one page's content, never the op
        return EMPTY


def article_and_outline(html: str, *, url: str | None = None) -> tuple[Article, str]:
    """`extract_article(html, url=url)` and `outline(html)` from one parse of `html`: a page's
    reading then costs 0.84-0.92 of what it costs with a parse each (issue 26; `python
    bench/fetch_cpu.py --reading`). Pure; never raises."""
    if not isinstance(html, str) or not html.strip():
        return EMPTY, ""
    try:
        tree = LexborHTMLParser(defuse_nesting(html))
    except Exception:  # a parser edge case must cost one page's content, never the op
        return EMPTY, ""
    plan = tree_outline(tree)  # first: the extraction narrows the tree it reads
    try:
        return _from_tree(tree, url), plan
    except Exception:
        return EMPTY, plan


def _extract(html: str, url: str | None) -> Article:
    return _from_tree(LexborHTMLParser(defuse_nesting(html)), url)


def _from_tree(tree: LexborHTMLParser, url: str | None) -> Article:
    page = run_passes(Page(url, tree))
    return Article(page.title, page.markdown, page.description, page.words, page.kind)
