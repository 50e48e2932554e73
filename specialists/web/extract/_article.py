"""`extract_article`: parse, pick the main content, render it as Markdown."""

from __future__ import annotations

import re
from dataclasses import dataclass

from selectolax.lexbor import LexborHTMLParser

from ._clean import find_skips, trim_tail
from ._dom import build_tree
from ._guard import defuse_nesting
from ._markdown import render
from ._meta import find_description, find_title
from ._prune import drop_chrome
from ._score import measure, select_content

_INVISIBLE = ("script", "style", "noscript", "template", "svg")
_WORD = re.compile(r"\w+")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")


@dataclass(frozen=True)
class Article:
    """The readable part of a page.

    `markdown` starts with a `# Title` line when a title is known, then the main content;
    `word_count` counts the `\\w+` runs of the content without the title or link targets.
    """

    title: str | None
    markdown: str
    description: str | None
    word_count: int


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
    tree = LexborHTMLParser(defuse_nesting(html))
    title = find_title(tree)
    description = find_description(tree)
    body = _main_markdown(tree, url, title)
    words = len(_WORD.findall(_LINK_TARGET.sub("]", body)))
    markdown = f"# {title}\n\n{body}" if title and body else body
    return Article(title=title, markdown=markdown, description=description, word_count=words)


def _main_markdown(tree: LexborHTMLParser, url: str | None, title: str | None) -> str:
    body = tree.body
    if body is None:
        return ""
    tree.strip_tags(list(_INVISIBLE))  # so the page's text length counts readable text only
    root, order = build_tree(body)
    measure(order)
    order = drop_chrome(order)
    content = select_content(root, order)
    blocks = trim_tail(render(content, base_url=url, skip=find_skips(content, title)))
    if not blocks:  # cleaning must never empty an article that has text
        blocks = render(content, base_url=url, skip=frozenset())
    return "\n\n".join(blocks)
