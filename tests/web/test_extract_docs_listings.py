"""Docs pages and listings: code blocks keep every token a highlighter marks up, and a
listing's controls (skip links, result counts, sort and paging controls) are left out while
its items stay. Each page is small and hand-made, showing one general shape."""

from __future__ import annotations

from selectolax.lexbor import LexborHTMLParser

from specialists.extract import extract_article, switched_off
from specialists.extract._clean import find_skips
from specialists.extract._dom import build_tree, text_of
from specialists.extract._score import measure

PROSE = [
    "A function declaration binds a name to a function object, and the name can be used "
    "before the declaration because declarations are hoisted to the top of their scope.",
    "Arguments are passed by value, but when the value is an object its properties can be "
    "changed by the function, and the caller then sees the changed object after the call.",
    "A function that calls itself is recursive; give it a base case that stops the calls, "
    "or it runs until the engine throws a range error for exceeding the maximum call stack.",
]
CODE = (
    "<pre class='language-js'><code>"
    "<span class='token keyword'>function</span> square(n) {\n"
    "  <span class='hljs-comment'>// the product of n with itself</span>\n"
    "  <span class='token meta'>return</span> n * n;\n"
    "}\n"
    "<span class='token tag'>&lt;button&gt;</span>Share<span class='token tag'>&lt;/button&gt;"
    "</span></code></pre>"
)


def docs_page(inner: str) -> str:
    """A docs page: a sidebar, then an article of prose around `inner`."""
    return (
        "<html><body><nav class='sidebar'><a href='/a'>Intro</a><a href='/b'>Functions</a></nav>"
        f"<main><article><h1>Functions</h1><p>{PROSE[0]}</p>{inner}<p>{PROSE[1]}</p>"
        f"<p>{PROSE[2]}</p></article></main></body></html>"
    )


def test_a_highlighters_token_classes_inside_code_never_name_chrome() -> None:
    markdown = extract_article(docs_page(CODE)).markdown
    assert "  // the product of n with itself\n  return n * n;" in markdown
    assert "<button>Share</button>" in markdown
    with switched_off({"code-tokens"}):  # "comment", "meta", "tag" name chrome elsewhere
        assert "the product of n" not in extract_article(docs_page(CODE)).markdown


def test_a_chrome_class_outside_code_still_names_chrome() -> None:
    ad = "<div class='comment-form'><p>Leave a comment below and we answer within a day.</p></div>"
    assert "Leave a comment" not in extract_article(docs_page(CODE + ad)).markdown


CARDS = [
    ("Trail runner 2", "A light shoe with a rock plate for technical trails and long days."),
    ("Road racer", "A firm, fast shoe for tempo runs and races from the mile to the marathon."),
    ("Daily trainer", "A cushioned shoe for easy miles, with a wide base for a stable stride."),
    ("Waterproof hiker", "A mid-height boot with a membrane that keeps feet dry in the rain."),
    ("Approach shoe", "A sticky rubber sole and a climbing zone at the toe for scrambling."),
]


def listing(controls: str) -> str:
    """A catalogue page: `controls` above a grid of cards, each a linked title and a line."""
    cards = "".join(
        f"<li class='card'><h3><a href='/p/{n}'>{title}</a></h3><p>{line}</p></li>"
        for n, (title, line) in enumerate(CARDS)
    )
    return (
        "<html><body><main><h1>Running shoes</h1>"
        f"{controls}<ul class='grid'>{cards}</ul>"
        "<p><a href='?page=2'>View all</a></p><p>Page 1 of 12</p></main></body></html>"
    )


CONTROLS = (
    "<p><a href='#results'>Skip to search results</a></p>"
    "<div><span>Showing 1–24 of 1,338 products</span></div>"
    "<div>Sort by: Best Match</div>"
)


def test_a_listings_counts_sort_and_paging_controls_are_left_out_and_its_items_kept() -> None:
    markdown = extract_article(listing(CONTROLS)).markdown
    for title, line in CARDS:
        assert f"[{title}](/p/" in markdown or title in markdown
        assert line in markdown
    for control in ("Skip to", "1,338 products", "Sort by", "View all", "Page 1 of 12"):
        assert control not in markdown, control
    with switched_off({"skip-listing-controls"}):
        kept = extract_article(listing(CONTROLS)).markdown
    assert all(control in kept for control in ("1,338 products", "Sort by: Best Match"))


def _listing_skips(html: str) -> dict[str, bool]:
    """Each link's text in `html`, and whether a listing's cleaning leaves it out."""
    body = LexborHTMLParser(html).body
    assert body is not None
    root, order = build_tree(body)
    measure(order)
    skips = find_skips([root], None, listing=True)  # a listing: its links are content
    return {text_of(elem): id(elem) in skips for elem in order if elem.tag == "a"}


def test_in_page_skip_links_are_left_out_but_a_link_elsewhere_that_says_skip_is_kept() -> None:
    html = (
        "<body><p><a href='#results'>Skip to search results</a></p>"
        "<p><a href='#main'>Jump to navigation</a></p>"
        "<p><a href='/songs/lou'>Skip to My Lou</a></p></body>"
    )
    assert _listing_skips(html) == {
        "Skip to search results": True,
        "Jump to navigation": True,
        "Skip to My Lou": False,
    }
    with switched_off({"skip-links"}):
        assert not any(_listing_skips(html).values())


def test_words_that_only_start_like_a_control_are_kept() -> None:
    inner = (
        "<ul><li>Sorted sets</li><li>Hashes</li></ul><h2>Sort by two keys</h2>"
        "<p>See more photos:</p><p>1 item</p>"
    )
    markdown = extract_article(docs_page(inner)).markdown
    for text in ("Sorted sets", "## Sort by two keys", "See more photos:"):
        assert text in markdown, text
