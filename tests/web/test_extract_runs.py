"""Runs of similar items: when they replace the picked block, and when they do not.

Each test is a small hand-made page showing one general page shape (never one site's markup).
"""

from __future__ import annotations

from specialists.extract import extract_article

LETTERS = "ABCDEFG"
PROSE = (
    "The council voted on Tuesday to extend the library's opening hours, after a year in "
    "which visits rose by a third and the reading rooms were full most evenings, and the "
    "head librarian said the change would cost less than the overtime now paid each month. "
)


def test_item_blocks_differing_in_a_second_modifier_class_are_one_listing() -> None:
    groups = "".join(
        f"<div class='cat_group {letter.lower()}'><h3>{letter}</h3><ul>"
        + "".join(f"<li><a href='/c/{letter}{n}'>{letter}-part kind {n}</a></li>" for n in range(4))
        + "</ul></div>"
        for letter in LETTERS
    )
    html = (
        "<html><body><main><div class='title'><h2>Catalog of hardware parts by letter</h2>"
        "<p>Find item details, images, spec sheets, drawings and models, sorted by the "
        "first letter of each kind of part.</p></div>"
        f"<div class='browse'>{groups}</div></main></body></html>"
    )
    markdown = extract_article(html, url="https://catalog.example/").markdown
    for letter in LETTERS:
        assert f"[{letter}-part kind 3](https://catalog.example/c/{letter}3)" in markdown


def test_an_article_with_much_prose_beside_a_larger_link_directory_stays_the_article() -> None:
    rows = "".join(
        f"<div class='dir-row'><a href='/d/{n}'>Directory entry number {n} of the city</a></div>"
        for n in range(200)
    )
    article = "".join(f"<p>{PROSE}{n}</p>" for n in range(9))
    html = (
        f"<html><body><article class='content'>{article}</article>"
        f"<div class='directory'>{rows}</div></body></html>"
    )
    markdown = extract_article(html).markdown
    assert PROSE.strip() in markdown
    assert "Directory entry" not in markdown


def test_a_listing_whose_cards_are_only_headings_keeps_every_card() -> None:
    names = [f"Conference on topic {n}" for n in range(8)]
    cards = "".join(
        f"<div class='row'><h2><a href='/e/{n}'>{name}</a></h2><h3>Tech in Chicago</h3></div>"
        for n, name in enumerate(names)
    )
    html = (
        f"<html><body><main><p>Upcoming.</p><div class='events'>{cards}</div></main></body></html>"
    )
    markdown = extract_article(html, url="https://events.example/").markdown
    assert all(f"## [{name}](https://events.example/e/" in markdown for name in names)


def test_headings_left_at_the_end_of_an_article_are_still_trimmed() -> None:
    article = "".join(f"<p>{PROSE}{n}</p>" for n in range(3))
    html = f"<html><body><article>{article}<h2>Share this</h2><h3>More</h3></article></body></html>"
    markdown = extract_article(html).markdown
    assert markdown.endswith("2")
