"""Chrome words in context: class words that name chrome beside an article but name the
content on other pages (taxonomy slugs, a thread of "comment"s, a grid of product cards),
and hidden wrappers that hold the page.

Each test is a small hand-made page showing one general page shape (never one site's markup).
"""

from __future__ import annotations

from specialists.extract import extract_article
from specialists.extract._attrs import names_chrome

POSTS = [
    "I have been trying to get the backup job to run every night, but it stops after the "
    "first volume and the log says nothing useful about why it gave up.",
    "Check whether the second volume is mounted when the job starts; the scheduler runs "
    "before the automounter on some systems, and then the job sees an empty directory.",
    "That was it, thank you. I moved the job to run ten minutes later and it has worked "
    "every night since, including the weekly full backup on Sunday.",
    "Same here on two machines, and moving the job later fixed it for me as well, thanks.",
]
REPLY = "A nested reply that agrees with the answer above and adds one more detail about it."
SIDEBAR = "The rules of this board: be kind, stay on topic and search before you post. " * 3


def test_a_taxonomy_class_names_a_topic_of_the_item_not_chrome() -> None:
    assert not names_chrome("product type-product product_tag-reusable-cups")
    assert not names_chrome("post tag-sidebar category-advertising")
    assert all(map(names_chrome, ["tag-list", "post-tags", "tag-cloud"]))


def test_product_cards_carrying_a_taxonomy_tag_class_are_all_kept() -> None:
    cards = "".join(
        f"<li class='product product_tag-cups'><a href='/p/{n}'><h2>Cup model {n}</h2></a>"
        f"<p>{text}</p></li>"
        for n, text in enumerate(POSTS)
    )
    html = f"<html><body><main><ul class='products'>{cards}</ul></main></body></html>"
    markdown = extract_article(html, url="https://shop.example/").markdown
    assert all(text in markdown for text in POSTS)


def test_a_hidden_wrapper_holding_most_of_the_main_element_is_kept_behind_a_large_menu() -> None:
    menu = "".join(
        f"<li><a href='/c/{n}'>Category number {n} of the shop</a></li>" for n in range(60)
    )
    prose = "".join(f"<p>{text}</p>" for text in POSTS)
    html = (
        f"<html><body><header><div class='drawer'><ul>{menu}</ul></div></header>"
        f"<main><div style='display:none'>{prose}</div>"
        "<div hidden><p>A hidden dialog that says something short.</p></div></main></body></html>"
    )
    markdown = extract_article(html).markdown
    assert all(text in markdown for text in POSTS)
    assert "hidden dialog" not in markdown


def _comment(text: str, inner: str = "") -> str:
    return f"<div class='thing comment'><div class='entry'><p>{text}</p></div>{inner}</div>"


def test_a_thread_of_comment_named_posts_is_the_page_with_its_nested_replies() -> None:
    nested = f"<div class='child'>{_comment(REPLY)}</div>"
    posts = _comment(POSTS[0], nested) + "".join(_comment(text) for text in POSTS[1:])
    html = (
        f"<html><body><div class='side'><p>{SIDEBAR}</p></div>"
        f"<div class='commentarea'><div class='sitetable'>{posts}</div></div></body></html>"
    )
    markdown = extract_article(html).markdown
    assert all(text in markdown for text in [*POSTS, REPLY])
    assert "rules of this board" not in markdown


def test_a_comment_section_under_a_longer_article_is_still_dropped() -> None:
    article = "".join(f"<p>{text} {text}</p>" for text in POSTS)
    comments = "".join(
        _comment(f"Comment {n}: nice article, thanks for writing it.") for n in range(4)
    )
    html = (
        f"<html><body><article>{article}</article><div id='comments'>{comments}</div></body></html>"
    )
    markdown = extract_article(html).markdown
    assert all(text in markdown for text in POSTS)
    assert "nice article" not in markdown


def test_cards_wrapping_a_chrome_named_box_are_kept_when_they_hold_the_page() -> None:
    cards = "".join(
        f"<li class='grid-item'><div class='card subscription-eligible'>"
        f"<a href='/p/{n}'><h3>Coffee blend {n}</h3></a><p>{text}</p></div></li>"
        for n, text in enumerate(POSTS)
    )
    html = (
        f"<html><body><main><p>All our coffee.</p><ul class='grid'>{cards}</ul></main>"
        "</body></html>"
    )
    markdown = extract_article(html, url="https://shop.example/").markdown
    assert all(text in markdown for text in POSTS)


def test_a_run_of_menu_named_blocks_stays_chrome_however_large() -> None:
    menu = "".join(f"<div class='menu-item'><p>{text}</p></div>" for text in [*POSTS, SIDEBAR])
    html = (
        f"<html><body><div class='menus'>{menu}</div>"
        f"<article><p>{REPLY}</p><p>{REPLY[::-1]}</p></article></body></html>"
    )
    markdown = extract_article(html).markdown
    assert not any(text in markdown for text in POSTS)


def test_a_carousel_under_a_recommendation_heading_is_left_out_with_its_heading() -> None:
    cards = "".join(
        f"<li><a href='/p/{n}'>Other shirt number {n} in green and white</a> $9</li>"
        for n in range(6)
    )
    prose = "".join(f"<p>{text}</p>" for text in POSTS)
    html = (
        f"<html><body><main><div class='item'>{prose}</div>"
        "<div class='box'><div><div><h2>People who viewed this item also viewed</h2></div></div>"
        f"<ul class='carousel'>{cards}</ul></div></main></body></html>"
    )
    markdown = extract_article(html, url="https://shop.example/").markdown
    assert all(text in markdown for text in POSTS)
    assert "Other shirt" not in markdown
    assert "also viewed" not in markdown


def test_a_recommendation_heading_over_most_of_the_content_takes_only_itself() -> None:
    posts = "".join(f"<article class='post'><p>{text}</p></article>" for text in POSTS)
    html = (
        "<html><body><main><div class='topic'><h2>Recommended Posts</h2>"
        f"<form>{posts}</form></div></main></body></html>"
    )
    markdown = extract_article(html).markdown
    assert all(text in markdown for text in POSTS)
    assert "Recommended Posts" not in markdown


def test_one_comment_named_list_holding_most_of_the_page_is_the_thread() -> None:
    posts = "".join(f"<li><p>{text}</p></li>" for text in POSTS)
    intro = "<p>Tags: a, b, c, d, e, f, g, h, i, j, k, l, m.</p>" * 6  # few chars, many points
    html = (
        f"<html><body><div class='intro'>{intro}</div>"
        f"<ul class='comment-list'>{posts}</ul></body></html>"
    )
    markdown = extract_article(html).markdown
    assert all(text in markdown for text in POSTS)


def test_a_consent_dialog_holding_more_prose_than_the_page_is_still_chrome() -> None:
    purposes = "".join(
        f"<p>Purpose {n}: store and access information on a device, create profiles, "
        "measure content, and use limited data to select advertising for 80 partners.</p>"
        for n in range(8)
    )
    html = (
        f"<html><body><main><p>{POSTS[0]}</p><p>{POSTS[1]}</p></main>"
        f"<div id='site-consent-sdk' class='show'>{purposes}</div></body></html>"
    )
    markdown = extract_article(html).markdown
    assert POSTS[0] in markdown
    assert "Purpose" not in markdown


def test_a_hero_banner_is_the_lead_section_of_a_landing_page_not_an_ad() -> None:
    assert not names_chrome("experience-commerce_assets-herobanner")
    assert not names_chrome("hero-banner")
    assert names_chrome("ad-banner")
    assert names_chrome("top-banner")
    heroes = "".join(
        f"<div class='region'><div class='hero-banner'><h2>Line {n}</h2><p>{text}</p></div></div>"
        for n, text in enumerate(POSTS)
    )
    html = f"<html><body><main>{heroes}</main></body></html>"
    markdown = extract_article(html).markdown
    assert all(text in markdown for text in POSTS)


def test_posts_whose_chrome_named_box_sits_two_levels_inside_each_item_are_kept() -> None:
    posts = "".join(
        f"<li class='row'><div class='inner'><div class='board-discussion'><p>{text}</p></div>"
        "</div></li>"
        for text in POSTS
    )
    html = (
        f"<html><body><div class='side'><p>{SIDEBAR}</p></div>"
        f"<ul class='board'>{posts}</ul></body></html>"
    )
    markdown = extract_article(html).markdown
    assert all(text in markdown for text in POSTS)


def test_a_collapsed_aria_hidden_panel_is_kept_and_a_short_aria_hidden_repeat_dropped() -> None:
    panels = "".join(
        f"<div class='panel'><h3><button aria-controls='p{n}'>Question {n}</button></h3>"
        f"<div id='p{n}' aria-hidden='true'><p>{text}</p><p>{REPLY}</p></div></div>"
        for n, text in enumerate(POSTS)
    )
    html = (
        f"<html><body><main><p>{REPLY}</p>"
        "<p aria-hidden='true'>A short pull quote.</p>"
        f"<div class='faq'>{panels}</div></main></body></html>"
    )
    markdown = extract_article(html).markdown
    assert all(text in markdown for text in POSTS)
    assert "pull quote" not in markdown


def test_collapsed_answers_and_tab_panes_are_kept_but_other_hidden_blocks_are_not() -> None:
    answers = "".join(
        f"<div class='faq__item'><h3>Question {n}</h3>"
        f"<div class='faq__answer' style='display: none;'><p>{text}</p><p>{REPLY}</p></div></div>"
        for n, text in enumerate(POSTS[:2])
    )
    panes = "".join(
        f"<div role='tabpanel' hidden><p>{text}</p><p>{REPLY}</p></div>" for text in POSTS[2:]
    )
    hidden_notice = f"<div class='notice' style='display:none'><p>{SIDEBAR}</p></div>"
    hidden_block = f"<div hidden><p>{SIDEBAR[::-1]}</p></div>"
    html = (
        f"<html><body><main><p>{REPLY}</p><div class='faq'>{answers}</div>{panes}"
        f"{hidden_notice}{hidden_block}</main></body></html>"
    )
    markdown = extract_article(html).markdown
    assert all(text in markdown for text in POSTS)
    assert "rules of this board" not in markdown
    assert SIDEBAR[::-1].strip()[:40] not in markdown


def test_forum_signatures_under_each_post_are_chrome() -> None:
    posts = "".join(
        f"<article class='post'><div class='post-body'><p>{text}</p></div>"
        "<div class='author-signature'><p>Want a better store? I build plugins, themes and "
        "more at my own site, ask me anything.</p></div></article>"
        for text in POSTS
    )
    html = f"<html><body><main><div class='topic'>{posts}</div></main></body></html>"
    markdown = extract_article(html).markdown
    assert all(text in markdown for text in POSTS)
    assert "I build plugins" not in markdown


def test_references_and_external_links_sections_are_back_matter() -> None:
    refs = "".join(
        f"<li>^ Source number {n}, archived from the original, retrieved in March.</li>"
        for n in range(5)
    )
    prose = "".join(f"<p>{text}</p>" for text in POSTS)
    html = (
        f"<html><body><main>{prose}<section><h2>References</h2><ol>{refs}</ol></section>"
        "<h2>External links</h2><ul><li><a href='https://x.example/'>Official site of "
        "the thing this page is about</a></li></ul></main></body></html>"
    )
    markdown = extract_article(html, url="https://wiki.example/").markdown
    assert all(text in markdown for text in POSTS)
    assert "Source number" not in markdown
    assert "Official site" not in markdown


def test_teaser_items_numbered_in_their_ids_are_one_run() -> None:
    items = "".join(
        f"<li id='list-teaser_{n}' class='teaser-item'><p>{text}</p></li>"
        for n, text in enumerate(POSTS)
    )
    html = (
        f"<html><body><div class='side'><p>{SIDEBAR}</p></div>"
        f"<ul class='teaser-list'>{items}</ul></body></html>"
    )
    markdown = extract_article(html).markdown
    assert all(text in markdown for text in POSTS)


def test_many_comments_under_a_declared_article_stay_chrome() -> None:
    comments = "".join(
        f"<li id='comment-{n}' class='comment'><p>{text} {text}</p></li>"
        for n, text in enumerate(POSTS * 2)
    )
    html = (
        "<html><head><meta property='og:type' content='article'></head><body>"
        f"<article><p>{REPLY}</p><p>{SIDEBAR}</p></article>"
        f"<ol class='comment-list'>{comments}</ol></body></html>"
    )
    markdown = extract_article(html).markdown
    assert REPLY in markdown
    assert POSTS[0] not in markdown
