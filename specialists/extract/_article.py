"""`extract_article`: parse, then run the extraction passes (`_passes.PASSES`) over the page."""

from __future__ import annotations

from dataclasses import dataclass

from selectolax.lexbor import LexborHTMLParser

from ._guard import defuse_nesting
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


def _extract(html: str, url: str | None) -> Article:
    page = run_passes(Page(url, LexborHTMLParser(defuse_nesting(html))))
    return Article(page.title, page.markdown, page.description, page.words, page.kind)
