"""`extract_article`: parse, pick the main content, render it as Markdown."""

from __future__ import annotations

import re
from dataclasses import dataclass

from selectolax.lexbor import LexborHTMLParser

from ._clean import drop_repeats, find_skips, trim_tail
from ._dom import Elem, build_tree
from ._guard import defuse_nesting
from ._join import join_items
from ._kind import (
    Declared,
    Layout,
    declared_types,
    declares_article,
    declares_product,
    declares_thread,
    page_type,
)
from ._markdown import render
from ._meta import find_description, find_title
from ._page_sections import join_sections, names_content
from ._prune import drop_chrome
from ._repeat import find_run, run_items, widen
from ._score import keep_most, link_density, measure, select_content, spread

_INVISIBLE = ("script", "style", "noscript", "template", "svg")
# A page whose visible body holds less text than this may be a script-rendered shell: its
# server-rendered copy can sit in a <noscript> (forum engines serve crawlers that way).
SHELL_MAX_CHARS = 2_000
# ...and a <noscript> is that copy when it holds this many times the visible text.
NOSCRIPT_TEXT_RATIO = 3
# Elements whose content the parser keeps as raw text: an unclosed <iframe> in a noscript
# holds the rest of the page as text, which is then the markup to read.
_RAW_TEXT = frozenset({"iframe", "noembed", "noframes", "xmp", "textarea", "title", "style"})
_WORD = re.compile(r"\w+")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")


NO_LAYOUT = Layout(listing=False, widened=False, run_items=0, run_link_density=0.0, prose_chars=0)


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
    tree = LexborHTMLParser(defuse_nesting(html))
    title = find_title(tree)
    description = find_description(tree)
    declared = declared_types(tree)
    body, layout = _main_markdown(_readable_tree(tree), url, title, declared)
    words = len(_WORD.findall(_LINK_TARGET.sub("]", body)))
    if description and words < len(_WORD.findall(description)):
        body, words = description, len(_WORD.findall(description))  # a script-rendered shell
    markdown = f"# {title}\n\n{body}" if title and body else body
    kind = page_type(declared, url, layout, body) if body else None
    return Article(title, markdown, description, words, kind)


def _readable_tree(tree: LexborHTMLParser) -> LexborHTMLParser:
    """`tree` without invisible elements, or the page inside its <noscript> for a shell page.

    Script-rendered pages show an empty shell to a reader without scripts and keep their
    server-rendered copy in a <noscript>; a noscript is that copy when the visible body is
    short and the noscript holds NOSCRIPT_TEXT_RATIO times its text. The copy is read as
    markup: the noscript's elements when the parser built them (its headings, posts and
    links), else its text, which is then the markup itself.
    """
    noscript = max(tree.css("noscript"), key=lambda node: len(node.text()), default=None)
    copy = noscript.text() if noscript is not None else ""
    markup = copy
    if noscript is not None and any(kid.tag not in _RAW_TEXT for kid in noscript.iter()):
        markup = noscript.inner_html or copy
    tree.strip_tags(list(_INVISIBLE))  # so the page's text length counts readable text only
    if len(copy) < NOSCRIPT_TEXT_RATIO * 100:  # most noscripts hold a tracking pixel
        return tree
    body = tree.body
    visible = len(body.text()) if body is not None else 0
    if visible >= SHELL_MAX_CHARS or len(copy) < NOSCRIPT_TEXT_RATIO * max(visible, 100):
        return tree
    inner = LexborHTMLParser(defuse_nesting(f"<body>{markup}</body>"))
    inner.strip_tags(list(_INVISIBLE))
    return inner


def _main_markdown(
    tree: LexborHTMLParser, url: str | None, title: str | None, declared: Declared
) -> tuple[str, Layout]:
    body = tree.body
    if body is None:
        return "", NO_LAYOUT
    thread = declares_thread(declared)
    article = declares_article(declared) and not thread
    root, order = build_tree(body, article=article, product=declares_product(declared))
    measure(order)
    order = drop_chrome(order)
    run = find_run(order)
    picked = select_content(root, order)
    content, listing = widen(picked, run, keep_pick=article or names_content(picked))
    if not listing:
        content = join_sections(spread(content, root), article=article)
    if thread:
        content = join_items(content, order)
    layout = _layout(content, picked, listing, run)
    content, scattered = keep_most(content, root)
    listing = listing or scattered
    skip = find_skips(content, title, listing=listing, product=declares_product(declared))
    blocks = trim_tail(drop_repeats(render(content, base_url=url, skip=skip)))
    if not blocks:  # cleaning must never empty an article that has text
        blocks = render(content, base_url=url, skip=frozenset())
    return "\n\n".join(blocks), layout


def _layout(content: list[Elem], picked: list[Elem], listing: bool, run: Elem | None) -> Layout:
    return Layout(
        listing=listing,
        widened=content != picked,
        run_items=run_items(run) if run is not None else 0,
        run_link_density=link_density(run) if run is not None else 0.0,
        prose_chars=sum(elem.text_len - elem.link_len for elem in content),
    )
