"""General misses a peer's real-world suite found, each on a small synthetic page."""

from __future__ import annotations

import unicodedata

from specialists.extract import extract_article

PROSE = [
    "The council voted on Tuesday to expand the river park, adding trails, a boat ramp, "
    "and a community garden that volunteers have been asking for since the spring.",
    "Residents who spoke at the meeting were mostly in favour, although several raised "
    "concerns about parking, noise from events, and the cost of maintaining the new paths.",
    "The first phase of the work is expected to start next year, with the garden opening "
    "once the soil has been tested and the irrigation lines have been laid by the city.",
]
NAV = '<nav><a href="/">Home</a> <a href="/news">News</a> <a href="/sport">Sport</a></nav>'
FOOTER = "<footer><p>Copyright 2019 Example Media, all rights reserved worldwide.</p></footer>"


def story(inner: str, *, head: str = "", before: str = "", after: str = "") -> str:
    """A news page whose article body holds `inner` then three prose paragraphs."""
    paragraphs = "".join(f"<p>{text}</p>" for text in PROSE)
    return (
        f"<html><head>{head}</head><body>{NAV}{before}<article><h1>River park grows</h1>"
        f"<div class='article-body'>{inner}{paragraphs}</div></article>{after}{FOOTER}"
        "</body></html>"
    )


def test_soft_hyphens_are_removed_from_words() -> None:
    html = story("<p>An extra\u00adordinary meeting ran long into the night, said the clerk.</p>")
    markdown = extract_article(html).markdown
    assert "\u00ad" not in markdown
    assert "An extraordinary meeting ran long" in markdown


def test_decomposed_unicode_is_normalised_to_nfc() -> None:
    decomposed = unicodedata.normalize("NFD", "Le café de la rivière a rouvert ses portes hier.")
    markdown = extract_article(story(f"<p>{decomposed}</p>")).markdown
    assert "Le café de la rivière a rouvert ses portes hier." in markdown
    assert markdown == unicodedata.normalize("NFC", markdown)


def in_header(lead: str) -> str:
    """The story with `lead` in the article's header, beside its byline."""
    header = f"<header><h1>River park grows</h1>{lead}<p class='byline'>By Jo Smith</p></header>"
    return story("").replace("<h1>River park grows</h1>", header)


def test_a_lead_paragraph_classed_intro_in_the_header_is_kept_without_the_byline() -> None:
    lead = "<p class='intro'>A short lead: the park will grow by half over three years.</p>"
    markdown = extract_article(in_header(lead)).markdown
    assert "A short lead: the park will grow by half over three years.\n\n" in markdown
    assert "Jo Smith" not in markdown


def test_a_lead_paragraph_marked_as_the_description_in_the_header_is_kept() -> None:
    lead = "<p itemprop='description'>The park will grow by half over three years.</p>"
    assert "The park will grow by half" in extract_article(in_header(lead)).markdown


def test_a_lead_paragraph_inside_a_picked_header_is_kept_without_the_byline() -> None:
    lead = "<p class='standfirst'>The park will grow by half over three years.</p>"
    html = in_header(lead).replace("<div class='article-body'>", "<div>")
    markdown = extract_article(html).markdown
    assert "The park will grow by half" in markdown
    assert "Jo Smith" not in markdown


def test_a_heading_after_an_in_article_ad_is_kept() -> None:
    paragraphs = "".join(f"<p>{text}</p>" for text in PROSE)
    inner = (
        f"{paragraphs}<div class='ad-slot'><span>Advertisement</span></div>"
        f"<h2>What happens next</h2>{paragraphs.replace('council', 'board')}"
    )
    markdown = extract_article(story(inner)).markdown
    assert "## What happens next" in markdown
    assert "Advertisement" not in markdown


def test_a_paragraph_that_is_only_a_link_is_kept_inside_prose() -> None:
    link = "<p><a href='/report'>Read the council's full report on the river park plans</a></p>"
    inner = f"<p>{PROSE[0]}</p>{link}"
    markdown = extract_article(story(inner), url="https://example.com/news/").markdown
    report = "[Read the council's full report on the river park plans](https://example.com/report)"
    assert f"{PROSE[0]}\n\n{report}\n\n" in markdown


def test_a_short_link_alone_in_a_paragraph_is_still_dropped() -> None:
    inner = f"<p>{PROSE[0]}</p><p><a href='/more'>Read more stories</a></p>"
    assert "Read more" not in extract_article(story(inner)).markdown


def test_follow_up_articles_of_an_infinite_scroll_page_are_not_appended() -> None:
    other = (
        "<article><h1>Bridge reopens after repairs</h1><div class='article-body'>"
        "<p>The old bridge reopened on Monday after eight months of repairs to its deck, "
        "its railings and the lights that had failed during the winter storms.</p>"
        "<p>Traffic was light in the morning, but the city expects queues by the weekend, "
        "when the market returns to the square on the other side of the river.</p>"
        "</div></article>"
    )
    head = '<meta property="og:type" content="article">'
    markdown = extract_article(story("", head=head, after=other * 2)).markdown
    assert PROSE[2] in markdown
    assert "bridge" not in markdown.lower()


def test_a_meta_description_standing_in_for_the_body_has_its_entities_decoded() -> None:
    head = (
        '<meta name="description" content="Fish &amp;amp; chips &amp;#8211; the '
        'town&amp;#8217;s favourite meal &amp;mdash; is back on the menu at the pier">'
    )
    html = f"<html><head>{head}</head><body><div id='app'></div></body></html>"
    article = extract_article(html)
    assert article.markdown == (
        "Fish & chips \u2013 the town\u2019s favourite meal \u2014 is back on the menu at the pier"
    )
    assert article.description == article.markdown
