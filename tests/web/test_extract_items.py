"""Pages made of many similar items (threads, listings, category grids): the items are the
content even where their class words name chrome beside an article.

Each test is a small hand-made page showing one general page shape (never one site's markup).
"""

from __future__ import annotations

from specialists.extract import extract_article
from specialists.extract._attrs import names_chrome
from specialists.extract._members import is_member_stats

POSTS = [
    f"Post number {n} of the thread: the backup job stops after the first volume on this "
    f"machine too, and moving it ten minutes later in the schedule fixed it for case {n}."
    for n in range(16)
]
SIDEBAR = "The rules of this board: be kind, stay on topic and search before you post. " * 2


def _page_of_posts(posts: list[str]) -> str:
    return (
        "<div class='page'>"
        + "".join(
            f"<div class='comment comment-container'><p class='user'>user{n}</p><p>{text}</p></div>"
            for n, text in enumerate(posts)
        )
        + "</div>"
    )


def test_posts_named_comment_inside_a_thread_holding_most_of_the_page_are_all_kept() -> None:
    # Four pages of four posts: no one run holds 40% of the page's text, the thread does.
    thread = "".join(_page_of_posts(POSTS[start : start + 4]) for start in range(0, 16, 4))
    html = (
        "<html><body><h1>Backup job stops after the first volume</h1>"
        f"<div class='rules'><p>{SIDEBAR}</p></div>"
        f"<section class='comment-wrapper'>{thread}</section></body></html>"
    )
    markdown = extract_article(html, url="https://forum.example/t/1").markdown
    assert all(text in markdown for text in POSTS)


def test_posts_in_runs_of_two_or_three_inside_a_thread_holding_most_of_the_page_are_kept() -> None:
    # Three pages of three posts: fewer than the four siblings that make a run elsewhere.
    thread = "".join(_page_of_posts(POSTS[start : start + 3]) for start in range(0, 9, 3))
    html = (
        "<html><body><h1>Backup job stops after the first volume</h1>"
        f"<div class='rules'><p>{SIDEBAR}</p></div>"
        f"<section class='comment-wrapper'>{thread}</section></body></html>"
    )
    markdown = extract_article(html, url="https://forum.example/t/3").markdown
    assert all(text in markdown for text in POSTS[:9])


def test_comment_runs_under_an_article_stay_chrome() -> None:
    prose = (
        "The council voted on Tuesday to extend the library's opening hours, after a year in "
        "which visits rose by a third and the reading rooms were full most evenings. "
    )
    article = "".join(f"<p>{prose}{n}</p>" for n in range(12))
    comments = "".join(_page_of_posts(POSTS[start : start + 4]) for start in range(0, 8, 4))
    html = (
        "<html><body><article class='story'>"
        f"{article}</article><section class='comment-wrapper'>{comments}</section></body></html>"
    )
    markdown = extract_article(html).markdown
    assert prose.strip() in markdown
    assert POSTS[0] not in markdown


def _menu(links: int) -> str:
    items = "".join(f"<li><a href='/c/{n}'>Board section number {n}</a></li>" for n in range(links))
    return f"<div class='drawer'><ul>{items}</ul></div>"


def test_posts_named_comment_holding_under_half_of_the_page_beside_a_large_menu_are_kept() -> None:
    # The posts hold about 45% of the readable text, a menu outside <nav> the rest.
    posts = "".join(f"<div class='comment'><p>{text}</p></div>" for text in POSTS[:8])
    html = f"<html><body>{_menu(70)}<div class='thread'>{posts}</div></body></html>"
    markdown = extract_article(html, url="https://forum.example/t/2").markdown
    assert all(text in markdown for text in POSTS[:8])


def test_product_cards_whose_text_sits_in_a_caption_are_all_kept() -> None:
    names = [f"Waterproof gear bag for the car, model {n}" for n in range(12)]
    cards = "".join(
        f"<li class='product'><div class='product-block'><div class='product-caption'>"
        f"<h3><a href='/p/{n}'>{name}</a></h3><p>A strong bag for the car, size {n}.</p>"
        f"<span>$2{n}.00</span></div></div></li>"
        for n, name in enumerate(names)
    )
    html = f"<html><body>{_menu(40)}<main><ul class='products'>{cards}</ul></main></body></html>"
    markdown = extract_article(html, url="https://shop.example/c/bags").markdown
    assert all(f"[{name}](https://shop.example/p/{n})" in markdown for n, name in enumerate(names))
    assert "A strong bag for the car, size 11." in markdown


def test_teasers_under_section_headings_in_a_block_that_hides_an_ad_are_kept() -> None:
    sections = "".join(
        f"<div class='row'><h2>Section {s}</h2><div class='grid-items hide-read-more-ad'>"
        + "".join(
            f"<div class='item'><h3><a href='/story/{s}{n}'>Story {n} of section {s}</a></h3>"
            f"<p>The summary of story {n} in section {s}, in one sentence of plain text.</p></div>"
            for n in range(3)
        )
        + "</div></div>"
        for s in "ABCDEFGH"
    )
    html = f"<html><body><main>{sections}</main></body></html>"
    markdown = extract_article(html, url="https://news.example/science/").markdown
    for s in "ABCDEFGH":
        assert f"The summary of story 2 in section {s}, in one sentence of plain text." in markdown


def test_a_class_hiding_chrome_names_a_feature_of_the_element_not_chrome() -> None:
    assert not names_chrome("grid-items hide-read-more-ad")
    assert names_chrome("read-more-ad")


def test_a_link_posted_for_discussion_declared_an_article_keeps_its_thread() -> None:
    comments = "".join(
        f"<li class='comments_subtree'><div class='comment'><p>{text}</p></div></li>"
        for text in POSTS[:8]
    )
    html = (
        "<html><head><meta property='og:type' content='article'></head><body>"
        "<h1><a href='https://example.org/goals'>Project goals for this year</a></h1>"
        f"<ol class='comments'>{comments}</ol></body></html>"
    )
    markdown = extract_article(html, url="https://links.example/s/abc").markdown
    assert all(text in markdown for text in POSTS[:8])


def test_a_thread_marked_up_as_one_article_keeps_its_posts() -> None:
    posts = "".join(f"<div class='comment'><p>{text}</p></div>" for text in POSTS[:8])
    html = (
        "<html><head><meta property='og:type' content='article'></head><body>"
        f"<article class='thread'><h1>Backup job stops early</h1>{posts}</article>"
        "</body></html>"
    )
    markdown = extract_article(html, url="https://forum.example/t/4").markdown
    assert all(text in markdown for text in POSTS[:8])


def test_a_declared_thread_whose_first_post_is_long_keeps_the_replies_beside_it() -> None:
    first = "".join(f"<p>{text}</p>" for text in POSTS[:8])
    replies = "".join(
        f"<li class='item itemcomment'><div class='comment'><p>{text}</p></div></li>"
        for text in POSTS[8:14]
    )
    html = (
        "<html><head><meta property='og:type' content='article'>"
        '<script type="application/ld+json">{"@type": "DiscussionForumPosting"}</script>'
        "</head><body><main><div class='discussion'><h1>Backup job stops early</h1>"
        f"<div class='message'>{first}</div></div>"
        f"<div class='commentswrap'><h2>Comments</h2><ul class='comments'>{replies}</ul></div>"
        "</main></body></html>"
    )
    markdown = extract_article(html, url="https://forum.example/discussion/5").markdown
    assert all(text in markdown for text in POSTS[:14])


def test_a_pick_inside_one_post_of_a_thread_widens_to_the_whole_thread() -> None:
    first = "".join(f"<p>{text}</p>" for text in POSTS[:6])
    replies = "".join(
        f"<div class='topic-post'><span class='creator'>user{n}</span>"
        f"<div class='post'><p>{text}</p></div></div>"
        for n, text in enumerate(POSTS[6:10])
    )
    html = (
        "<html><body><h1>Backup job stops early</h1><div class='thread'>"
        "<div class='topic-post'><span class='creator'>asker</span>"
        f"<div class='post'>{first}</div></div>{replies}</div></body></html>"
    )
    markdown = extract_article(html, url="https://forum.example/t/6").markdown
    assert all(text in markdown for text in POSTS[:10])


def test_a_pick_inside_one_section_of_a_declared_article_stays_the_pick() -> None:
    body = "".join(f"<p>{text}</p>" for text in POSTS[:6])
    boxes = "".join(
        f"<div class='block'><p>Promotional box {n} with a short line of text about "
        "our other products and services.</p></div>"
        for n in range(4)
    )
    html = (
        "<html><head><meta property='og:type' content='article'></head><body><main>"
        f"<div class='block'><div class='story'>{body}</div></div>{boxes}</main></body></html>"
    )
    markdown = extract_article(html, url="https://news.example/2026/01/story").markdown
    assert POSTS[5] in markdown
    assert "Promotional box" not in markdown


def test_cards_with_a_linked_title_over_a_longer_description_are_a_listing_keeping_titles() -> None:
    cards = "".join(
        f"<div class='card'><h3><a href='/p/{n}'>Bamboo dog bowl, large, {n}</a></h3>"
        f"<p>Three colours and two sizes, washable, with a non-slip base, item {n}.</p></div>"
        for n in range(6)
    )
    html = f"<html><body><main><div class='grid'>{cards}</div></main></body></html>"
    markdown = extract_article(html, url="https://shop.example/c/bowls").markdown
    assert all(
        f"### [Bamboo dog bowl, large, {n}](https://shop.example/p/{n})" in markdown
        for n in range(6)
    )


def test_member_statistics_beside_each_post_are_left_out() -> None:
    posts = "".join(
        f"<div class='post'><dl class='postprofile'><dt><a href='/u/{n}'>user{n}</a></dt>"
        f"<dd><strong>Posts:</strong> <a href='/s/{n}'>1,07{n}</a></dd>"
        f"<dd><strong>Joined:</strong> Mon Jul 24, 2017 9:2{n} am</dd></dl>"
        f"<div class='content'><p>{text}</p></div></div>"
        for n, text in enumerate(POSTS[:6])
    )
    html = f"<html><body><main><div class='topic'>{posts}</div></main></body></html>"
    markdown = extract_article(html, url="https://forum.example/viewtopic.php?t=7").markdown
    assert all(text in markdown for text in POSTS[:6])
    assert "Posts:" not in markdown
    assert "Joined:" not in markdown


def test_a_line_about_posts_inside_prose_is_kept() -> None:
    assert not is_member_stats(
        "Posts: these are the rules for new members of the board, read them."
    )
    assert is_member_stats("Join Date: Aug 2008 Posts: 1,077")


def test_member_statistics_printed_as_term_pairs_without_colons_are_left_out() -> None:
    posts = "".join(
        f"<article class='message'><div class='user'><h4><a href='/u/{n}'>user{n}</a></h4>"
        f"<dl class='pairs'><dt>Joined</dt><dd>Mar {n + 1}, 2020</dd></dl>"
        f"<dl class='pairs'><dt>Messages</dt><dd>1,23{n}</dd></dl>"
        f"<dl class='pairs'><dt>Reaction score</dt><dd>45{n}</dd></dl></div>"
        f"<div class='content'><p>{text}</p></div></article>"
        for n, text in enumerate(POSTS[:6])
    )
    html = f"<html><body><main><div class='thread'>{posts}</div></main></body></html>"
    markdown = extract_article(html, url="https://forum.example/threads/8").markdown
    assert all(text in markdown for text in POSTS[:6])
    assert "Reaction score" not in markdown
    assert "Mar 3, 2020" not in markdown


def test_forum_interface_labels_between_posts_are_left_out() -> None:
    posts = "".join(
        f"<div class='post'><div class='content'><p>{text}</p></div>"
        "<div class='actions'><span>Top</span></div>"
        "<div class='buttons'><span>Reply With Quote</span></div></div>"
        for text in POSTS[:6]
    )
    html = f"<html><body><main><div class='thread'>{posts}</div></main></body></html>"
    markdown = extract_article(html, url="https://forum.example/showthread.php?t=9").markdown
    assert all(text in markdown for text in POSTS[:6])
    assert "Top" not in markdown
    assert "Reply With Quote" not in markdown


def test_a_card_line_rendered_twice_in_a_row_reads_once() -> None:
    cards = "".join(
        f"<div class='card'><h2><a href='/p/{n}'>Scaling storage at the company, part {n}</a></h2>"
        "<p class='mobile'>Engineering Blog</p><p class='desktop'>Engineering Blog</p>"
        f"<p>{POSTS[n]}</p></div>"
        for n in range(5)
    )
    html = f"<html><body><main><div class='feed'>{cards}</div></main></body></html>"
    markdown = extract_article(html, url="https://blog.example/").markdown
    assert "Engineering Blog\n\nEngineering Blog" not in markdown
    assert markdown.count("Engineering Blog") == 5
    assert all(text in markdown for text in POSTS[:5])
