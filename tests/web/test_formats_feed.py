"""RSS 2.0, Atom 1.0 and RSS 1.0 feeds as Markdown lists (specialists.formats.feed)."""

from __future__ import annotations

import pytest

from specialists.formats import Limits, Unreadable
from specialists.formats.feed import SUMMARY_CHARS, is_feed, read_feed
from tests.web.documents_support import BILLION_LAUGHS, EXTERNAL_ENTITY, fixture

RSS2 = """\
# Harbour Notes

- [Dredging starts on the north berth](https://harbour.example/news/dredging) — 2026-11-26T16:30:00Z
  The dredger Keel arrives on Monday. Boats must leave the berth by Sunday night.
- [Fees & moorings: the new table](https://harbour.example/news/fees) — 2026-11-24T08:00:00Z
  Mooring fees rise by 4% from January.
- [Relative link entry](https://harbour.example/news/slipway) — 2026-11-20T12:00:00Z
  Who owns the old slipway? The council says it does not.
- A script link
  Not a link a reader can follow."""

ATOM = """\
# Ridge Survey Log

- [Cairn 4 rebuilt](https://survey.example/log/cairn-4) — 2026-10-12T07:00:00Z
  Rebuilt with stones from the old wall \\<not a tag>.
- [Landslide moves cairn 9](https://survey.example/log/cairn-9) — 2026-11-25T18:30:02Z
  The slope gave way after the storm. The cairn now sits 40 m downhill."""

RSS1 = """\
# Quarry Bulletin

- [Granite base stones in stock](https://quarry.example/news/granite) — 2026-11-02T12:00:00Z
  Cut to order; delivery within two weeks.
- [Winter hours](https://quarry.example/news/hours)
  Open weekdays only until March."""


def test_an_rss2_feed_lists_entries_with_links_utc_dates_and_plain_summaries() -> None:
    document = read_feed(fixture("rss2.xml"), Limits())
    assert document.markdown == RSS2
    assert (document.title, document.published, document.lang, document.cut) == (
        "Harbour Notes",
        "2026-11-27T09:00:00Z",
        "en-gb",
        False,
    )


def test_an_atom_feed_resolves_relative_links_and_reads_text_html_and_xhtml() -> None:
    document = read_feed(fixture("atom.xml"), Limits())
    assert document.markdown == ATOM
    assert (document.title, document.author, document.published, document.lang) == (
        "Ridge Survey Log",
        "Ada Marsh",
        "2026-11-25T18:30:02Z",
        "en",
    )


def test_an_rss1_rdf_feed_lists_its_items() -> None:
    document = read_feed(fixture("rss1.rdf"), Limits())
    assert document.markdown == RSS1
    assert (document.title, document.published) == ("Quarry Bulletin", "2026-11-02T12:00:00Z")


def _rss(entries: int) -> bytes:
    items = "".join(
        f"<item><title>Entry {n}</title><link>https://a.example/{n}</link></item>"
        for n in range(entries)
    )
    return f'<rss version="2.0"><channel><title>T</title>{items}</channel></rss>'.encode()


def test_max_entries_shows_n_and_says_how_many_more_were_left_out() -> None:
    exact = read_feed(_rss(3), Limits(max_entries=3))
    over = read_feed(_rss(4), Limits(max_entries=3))
    assert not exact.cut
    assert exact.markdown.count("\n- [Entry") == 3
    assert over.cut
    assert over.markdown == exact.markdown + "\n\n_(1 more entry left out: max_entries 3)_"


def test_max_chars_is_met_at_n_and_cut_at_n_minus_one_on_a_whole_line() -> None:
    whole = read_feed(fixture("atom.xml"), Limits()).markdown
    assert read_feed(fixture("atom.xml"), Limits(max_chars=len(whole))).cut is False
    cut = read_feed(fixture("atom.xml"), Limits(max_chars=len(whole) - 1))
    assert (cut.cut, cut.markdown) == (True, whole.rsplit("\n", 1)[0])


def test_a_long_summary_is_shortened_at_a_word() -> None:
    text = "word " * 200
    feed = f"<rss><channel><item><title>t</title><description>{text}</description></item>"
    markdown = read_feed(f"{feed}</channel></rss>".encode(), Limits()).markdown
    summary = markdown.split("\n  ")[1]
    assert summary.endswith("word…")
    assert len(summary) <= SUMMARY_CHARS + 1


def test_markdown_in_titles_and_summaries_stays_text() -> None:
    item = "<item><title># Not [a] heading</title><link>https://a.example/x (1)</link>"
    item += "<description>- not a list</description></item>"
    item += "<item><title>&gt; no quote</title><description>1. no number</description></item>"
    markdown = read_feed(f"<rss><channel>{item}</channel></rss>".encode(), Limits()).markdown
    assert markdown == (
        "- [# Not (a) heading](https://a.example/x%20%281%29)\n"
        "  \\- not a list\n"
        "- \\> no quote\n"
        "  1\\. no number"
    )


def test_rss_0_91_with_its_public_dtd_line_still_reads() -> None:
    data = (
        b'<?xml version="1.0"?>\n<!DOCTYPE rss PUBLIC "-//Netscape Communications//DTD RSS 0.91'
        b'//EN" "http://my.netscape.com/publish/formats/rss-0.91.dtd">\n<rss version="0.91">'
        b"<channel><title>Old</title><item><title>One</title><link>http://o.example/1</link>"
        b"</item></channel></rss>"
    )
    assert read_feed(data, Limits()).markdown == "# Old\n\n- [One](http://o.example/1)"


def test_a_billion_laughs_feed_is_too_large() -> None:
    with pytest.raises(Unreadable) as caught:
        read_feed(BILLION_LAUGHS, Limits())
    assert caught.value.code == "too_large"


def test_an_external_entity_is_refused_unread() -> None:
    with pytest.raises(Unreadable) as caught:
        read_feed(EXTERNAL_ENTITY, Limits())
    assert caught.value.code == "unsupported_content"


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (fixture("rss2.xml")[:700], "corrupt_document"),  # truncated
        (b"", "corrupt_document"),
        (b"\xff\xfe not xml", "corrupt_document"),
        (b"<html><body>a page</body></html>", "unsupported_content"),
        (
            b'<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"/>',
            "unsupported_content",
        ),
    ],
)
def test_xml_that_is_no_feed_is_refused_with_its_cause(data: bytes, code: str) -> None:
    with pytest.raises(Unreadable) as caught:
        read_feed(data, Limits())
    assert caught.value.code == code


def test_an_empty_feed_says_it_has_no_entries() -> None:
    document = read_feed(b"<rss><channel><title>Quiet</title></channel></rss>", Limits())
    assert document.markdown == "# Quiet\n\n_(no entries)_"


def test_a_date_no_one_can_read_is_left_out() -> None:
    item = "<item><title>t</title><pubDate>yesterday-ish</pubDate></item>"
    markdown = read_feed(f"<rss><channel>{item}</channel></rss>".encode(), Limits()).markdown
    assert markdown == "- t"


@pytest.mark.parametrize(
    ("data", "feed"),
    [
        (fixture("rss2.xml"), True),
        (fixture("atom.xml"), True),
        (fixture("rss1.rdf"), True),
        (
            b'\xef\xbb\xbf<?xml version="1.0"?><!-- <html> --><?xml-stylesheet href="s.xsl"?><rss>',
            True,
        ),
        ('<?xml version="1.0" encoding="utf-16"?><rss version="2.0">'.encode("utf-16"), True),
        (b'<feed xmlns="http://example.org/not-atom">', False),
        (b'<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/">', False),
        (b"<html><body><rss>", False),
        (b"", False),
    ],
)
def test_xml_served_as_text_xml_is_sniffed_as_a_feed_by_its_root(data: bytes, feed: bool) -> None:
    assert is_feed(data) is feed


@pytest.mark.parametrize(
    ("encoding", "title"),
    [
        ("windows-1251", "Привет"),
        ("koi8-r", "Привет"),
        ("iso-8859-2", "Łódź"),
        ("shift_jis", "日本語のニュース"),
        ("euc-jp", "日本語のニュース"),
        ("gb2312", "中文新闻"),
        ("big5", "中文新聞"),
        ("euc-kr", "한국어 뉴스"),
    ],
)
def test_a_feed_in_its_declared_legacy_encoding_reads(encoding: str, title: str) -> None:
    xml = f'<?xml version="1.0" encoding="{encoding}"?><rss><channel><title>{title}</title>'
    document = read_feed(f"{xml}</channel></rss>".encode(encoding), Limits())
    assert document.title == title
