"""The extractor on pages other than news articles: shells, forums, listings, product pages.

Each test is a small hand-made page showing one general page shape (never one site's markup).
"""

from __future__ import annotations

from selectolax.lexbor import LexborHTMLParser

from specialists.extract import extract_article
from specialists.extract._dom import build_tree
from specialists.extract._repeat import find_run
from specialists.extract._score import measure

POSTS = [
    "I have been trying to get the backup job to run every night, but it stops after the "
    "first volume and the log says nothing useful about why it gave up.",
    "Check whether the second volume is mounted when the job starts; the scheduler runs "
    "before the automounter on some systems, and then the job sees an empty directory.",
    "That was it, thank you. I moved the job to run ten minutes later and it has worked "
    "every night since, including the weekly full backup on Sunday.",
]


def test_a_script_shell_page_is_read_from_its_noscript_copy() -> None:
    copy = "".join(f"<div class='post'><p>{text}</p></div>" for text in POSTS)
    html = (
        "<html><body><div id='app'>Loading the forum, please wait.</div>"
        f"<noscript>{copy}</noscript></body></html>"
    )
    markdown = extract_article(html).markdown
    assert all(text in markdown for text in POSTS)
    assert "Loading" not in markdown


def test_a_noscript_on_a_full_page_is_still_ignored() -> None:
    prose = "".join(f"<p>{text}</p>" for text in POSTS * 6)
    html = (
        f"<html><body><article>{prose}</article>"
        "<noscript><p>Please enable JavaScript to see the comments, which need it.</p>"
        "</noscript></body></html>"
    )
    assert "enable JavaScript" not in extract_article(html).markdown


def test_react_streamed_segments_hidden_until_scripts_move_them_are_kept() -> None:
    html = (
        "<html><body><main><template id='B:0'></template></main>"
        f"<div hidden id='S:0'><article><p>{POSTS[0]}</p><p>{POSTS[1]}</p></article></div>"
        f"<div hidden id='other'><p>{POSTS[2]}</p></div></body></html>"
    )
    markdown = extract_article(html).markdown
    assert POSTS[0] in markdown
    assert POSTS[1] in markdown
    assert POSTS[2] not in markdown


def test_the_description_stands_in_for_a_body_that_says_less() -> None:
    head = f'<meta name="description" content="{POSTS[0]}">'
    html = f"<html><head>{head}</head><body><div id='app'>Loading…</div></body></html>"
    assert extract_article(html).markdown == POSTS[0]


def _in_wrapper(cls: str) -> str:
    """The three prose paragraphs, each in its own element of class `cls`, on a page."""
    blocks = "".join(f"<div class='{cls}'><p>{text}</p></div>" for text in POSTS)
    return f"<html><body><nav><a href='/'>Home</a></nav><main>{blocks}</main></body></html>"


def test_page_builder_widget_containers_are_content_not_chrome() -> None:
    markdown = extract_article(_in_wrapper("elementor-widget-container")).markdown
    assert all(text in markdown for text in POSTS)


def test_a_class_saying_an_item_has_an_author_is_not_an_author_box() -> None:
    markdown = extract_article(_in_wrapper("summary-item summary-item-has-author")).markdown
    assert all(text in markdown for text in POSTS)


def test_a_chrome_word_inside_a_longer_word_names_nothing() -> None:
    markdown = extract_article(_in_wrapper("field-seofootercopy")).markdown
    assert all(text in markdown for text in POSTS)


def test_an_in_page_jump_link_target_keeps_its_text() -> None:
    markdown = extract_article(_in_wrapper("jump-link")).markdown
    assert all(text in markdown for text in POSTS)


def test_script_hook_classes_on_forum_posts_do_not_make_them_comments() -> None:
    items = "".join(f"<li class='b-post js-comment-entry'><p>{text}</p></li>" for text in POSTS)
    html = f"<html><body><main><ul class='conversation-list'>{items}</ul></main></body></html>"
    markdown = extract_article(html).markdown
    assert all(text in markdown for text in POSTS)


def test_chrome_words_still_name_chrome_as_whole_pieces_starts_and_ends() -> None:
    extra = (
        "<div class='site-footer'><p>Footer words that no reader of the thread wants.</p></div>"
        "<div class='sharebar'><p>Sharing buttons text for every network going.</p></div>"
        "<div class='topmenu'><p>Menu entries listed here for the whole website.</p></div>"
        "<div class='side-bar'><p>Sidebar paragraph about other things entirely.</p></div>"
    )
    html = _in_wrapper("post").replace("</main>", f"{extra}</main>")
    markdown = extract_article(html).markdown
    assert all(text in markdown for text in POSTS)
    for gone in ("Footer words", "Sharing buttons", "Menu entries", "Sidebar paragraph"):
        assert gone not in markdown


CARDS = [
    ("Walnut side table", "A small table in oiled walnut with one drawer"),
    ("Oak bookshelf", "Five shelves of solid oak, fixed to the wall"),
    ("Pine bench", "A two-seat bench in pine for the hallway"),
    ("Ash desk", "A writing desk in ash with a cable tray at the back"),
    ("Beech stool", "A kitchen stool in beech at counter height"),
    ("Cherry cabinet", "A glass-front cabinet in cherry for display"),
]


def test_a_listing_of_link_cards_keeps_every_card() -> None:
    cards = "".join(
        f"<a class='item' href='/p/{n}'><h2>{name}</h2><p>{blurb}</p></a>"
        for n, (name, blurb) in enumerate(CARDS)
    )
    intro = "<p>Furniture made in our own workshop, from wood we buy from local mills.</p>"
    html = f"<html><body><main>{intro}<div class='grid'>{cards}</div></main></body></html>"
    markdown = extract_article(html, url="https://shop.example/").markdown
    for name, blurb in CARDS:
        assert f"## [{name}](https://shop.example/p/" in markdown or name in markdown
        assert blurb in markdown


REPLIES = [
    "Same here on two machines, and moving the job later fixed it for me as well, thanks.",
    "Worth adding a check at the start of the job that fails loudly when the disk is absent.",
    "Marking this as solved; the scheduler order was the cause for everyone in this thread.",
]


def test_sibling_forum_posts_are_all_kept_not_only_the_longest() -> None:
    long_post = "".join(f"<p>{text}</p>" for text in POSTS)
    posts = "".join(
        f"<div class='post'><div class='author'>user{n}</div>"
        f"<div class='post-text'>{text}</div></div>"
        for n, text in enumerate([long_post, *(f"<p>{text}</p>" for text in REPLIES)])
    )
    html = (
        "<html><body><div class='header'><a href='/'>Forum</a></div>"
        f"<div class='thread'>{posts}</div>"
        "<div class='footer'><a href='/rules'>Rules</a></div></body></html>"
    )
    markdown = extract_article(html).markdown
    assert all(text in markdown for text in POSTS + REPLIES)


def test_an_article_beside_a_short_card_grid_stays_the_article() -> None:
    cards = "".join(
        f"<a class='card' href='/{n}'><h3>{name}</h3></a>" for n, (name, _) in enumerate(CARDS)
    )
    prose = "".join(f"<p>{text}</p>" for text in POSTS)
    html = f"<html><body><article>{prose}</article><div class='more'>{cards}</div></body></html>"
    markdown = extract_article(html).markdown
    assert markdown == "\n\n".join(POSTS)


def test_a_service_page_of_many_sections_keeps_the_sections_beside_the_wordiest() -> None:
    text = f"<div class='text'><p>{POSTS[0]}</p><p>{POSTS[1]}</p></div>"
    lead = f"<section class='intro'><h2>Our service</h2>{text}</section>"
    short = ["Same-day repairs", "Free quotes online", "Ten-year guarantee", "Local engineers"]
    items = "".join(f"<li>{line}</li>" for line in short)
    kinds = ["pricing", "support", "warranty", "area", "team", "faq"]  # unlike, so no run
    features = "".join(
        f"<section class='{kind}'><h2>Plan {kind}</h2><ul>{items}</ul></section>" for kind in kinds
    )
    html = f"<html><body><div class='page'>{lead}{features}</div></body></html>"
    markdown = extract_article(html).markdown
    assert POSTS[0] in markdown
    assert markdown.count("- Same-day repairs") == 6


def _typed(head: str, body: str, url: str) -> str | None:
    html = f"<html><head>{head}</head><body>{body}</body></html>"
    return extract_article(html, url=url).page_type


ARTICLE_BODY = "<article>" + "".join(f"<p>{text}</p>" for text in POSTS * 3) + "</article>"


def test_page_type_says_product_for_a_page_declaring_one_product() -> None:
    head = '<meta property="og:type" content="product">'
    assert _typed(head, ARTICLE_BODY, "https://shop.example/p/desk") == "product"


def test_page_type_says_forum_for_a_thread_url_on_a_forum_host() -> None:
    url = "https://forum.example.org/t/backup-stops-after-first-volume/1234"
    assert _typed("", ARTICLE_BODY, url) == "forum"
    assert _typed("", ARTICLE_BODY, "https://www.example.org/t/backup/1234") is None


def test_page_type_says_forum_for_a_thread_url_with_schema_posts() -> None:
    posts = "".join(
        f"<div itemscope itemtype='https://schema.org/Comment'><p>{text}</p></div>"
        for text in POSTS
    )
    assert _typed("", posts, "https://www.example.org/threads/backup.99/") == "forum"


def test_page_type_says_docs_under_a_docs_path_or_host() -> None:
    assert _typed("", ARTICLE_BODY, "https://example.dev/docs/install") == "docs"
    assert _typed("", ARTICLE_BODY, "https://docs.example.dev/install") == "docs"


def test_page_type_says_listing_for_many_link_heavy_items() -> None:
    cards = "".join(
        f"<div class='card'><a href='/p/{n}'>{name}: {blurb}</a></div>"
        for n, (name, blurb) in enumerate(CARDS + CARDS)
    )
    assert _typed("", f"<main><div class='grid'>{cards}</div></main>", "https://x.example/") == (
        "listing"
    )


def _priced_grid(prices: int) -> str:
    items = CARDS + CARDS
    cards = "".join(
        f"<div class='card'><a href='/p/{n}'>{name}: {blurb}</a>"
        + (f"<span>${n + 10}.99</span>" if n < prices else "")
        + "</div>"
        for n, (name, blurb) in enumerate(items)
    )
    return f"<main><div class='grid'>{cards}</div></main>"


def test_page_type_says_collection_for_a_listing_whose_items_each_show_a_price() -> None:
    items = len(CARDS + CARDS)
    assert _typed("", _priced_grid(items), "https://x.example/") == "collection"
    assert _typed("", _priced_grid(items - 1), "https://x.example/") == "listing"


def test_page_type_says_article_only_for_a_declared_article_at_an_article_url() -> None:
    head = '<meta property="og:type" content="article">'
    assert _typed(head, ARTICLE_BODY, "https://news.example/2024/05/backup-story") == "article"
    assert _typed(head, ARTICLE_BODY, "https://news.example/about-us") is None
    assert _typed("", ARTICLE_BODY, "https://news.example/2024/05/backup-story") is None


def test_page_type_is_absent_on_an_empty_page() -> None:
    head = '<meta property="og:type" content="product">'
    assert _typed(head, "", "https://shop.example/p/desk") is None


def test_the_parts_of_a_link_card_are_never_dropped_for_their_class_names() -> None:
    cards = "".join(
        f"<div class='cell'><a class='box' href='/p/{n}'><div class='caption'>"
        f"<div class='name'>{name}</div><div class='blurb'>{blurb}</div></div></a></div>"
        for n, (name, blurb) in enumerate(CARDS)
    )
    html = f"<html><body><main><div class='product-list'>{cards}</div></main></body></html>"
    markdown = extract_article(html, url="https://shop.example/").markdown
    assert all(blurb in markdown for _, blurb in CARDS)


def test_content_holding_little_of_the_page_text_gives_way_to_what_holds_most() -> None:
    specs = ("Made to order", "Hand finished", "Ships in a week", "Ten-year warranty")
    tile = "".join(f"<div>{spec}</div>" for spec in specs)  # each too short to score as prose
    groups = "".join(
        f"<section class='shelf-{kind}'><h2>{kind}</h2>"
        + "".join(
            f"<div class='tile'><a href='/p/{kind}/{n}'>{name}, all sizes and finishes</a>"
            f"{tile}</div>"
            for n, (name, _) in enumerate(CARDS[:3])
        )
        + "</section>"
        for kind in ("oak", "ash", "elm")
    )
    intro = f"<div class='intro'><div class='lead'><p>{POSTS[0]}</p></div></div>"
    html = f"<html><body><main>{intro}<div class='shelves'>{groups}</div></main></body></html>"
    markdown = extract_article(html, url="https://shop.example/").markdown
    assert POSTS[0] in markdown
    assert markdown.count("Ten-year warranty") == 9
    assert "[Walnut side table, all sizes and finishes](https://shop.example/p/oak/0)" in markdown


def test_a_utility_class_variant_names_a_condition_not_chrome() -> None:
    markdown = extract_article(_in_wrapper("max-w-3xl print:break-inside-avoid")).markdown
    assert all(text in markdown for text in POSTS)


def test_a_hidden_wrapper_holding_most_of_the_page_is_kept_and_a_small_one_dropped() -> None:
    prose = "".join(f"<p>{text}</p>" for text in POSTS)
    html = (
        f"<html><body><div style='display:none'><article>{prose}</article></div>"
        "<div hidden><p>A hidden dialog that says something short.</p></div></body></html>"
    )
    markdown = extract_article(html).markdown
    assert all(text in markdown for text in POSTS)
    assert "hidden dialog" not in markdown


def test_a_legal_disclaimer_list_beside_the_product_text_is_chrome() -> None:
    legal = "".join(
        f"<li>{n}. Offer terms apply, see store for details; availability and pricing vary "
        "by region and may change without notice, taxes and fees not included.</li>"
        for n in range(2)
    )
    prose = "".join(f"<p>{text}</p>" for text in POSTS)
    html = (
        f"<html><body><main><section class='product'>{prose}</section>"
        f"<ol class='common-bottom-disclaimer__list'>{legal}</ol></main></body></html>"
    )
    markdown = extract_article(html).markdown
    assert all(text in markdown for text in POSTS)
    assert "Offer terms apply" not in markdown


def test_items_differing_only_in_a_later_modifier_class_are_one_run() -> None:
    modifiers = ["featured", "", "featured", "", "odd", "odd"]
    cards = "".join(
        f"<div class='row item {extra}'><a href='/e/{n}'>{name}</a><p>{blurb}</p></div>"
        for n, ((name, blurb), extra) in enumerate(zip(CARDS, modifiers, strict=True))
    )
    body = LexborHTMLParser(f"<html><body><div class='events'>{cards}</div></body></html>").body
    assert body is not None
    _, order = build_tree(body)
    measure(order)
    run = find_run(order)
    assert run is not None
    assert run.hint == "events "


def test_a_long_paragraph_served_twice_is_written_once_and_short_ones_may_repeat() -> None:
    long = " ".join(POSTS[:2])  # over REPEAT_MIN_CHARS
    posts = "".join(
        f"<div class='post'><p>{text}</p><p>Thanks for reading.</p></div>"
        for text in (long, POSTS[2], long, POSTS[0])
    )
    html = f"<html><body><div class='thread'>{posts}</div></body></html>"
    markdown = extract_article(html).markdown
    assert markdown.count(long) == 1
    assert markdown.count("Thanks for reading.") == 4
