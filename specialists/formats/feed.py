"""Feeds as a Markdown list of entries: RSS 2.0 (and 0.9x), Atom 1.0, RSS 1.0 (RDF).

Each entry is one list item: its title as a link, its date as ISO-8601 UTC, and under it a
plain-text summary of at most ``SUMMARY_CHARS``. The feed's title is the TITLE. Entries past
``limits.max_entries`` are left out and counted in a line under the list. The XML is parsed
by defusedxml (``_xml.parse_xml``): entity bombs and external entities are refused.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from selectolax.lexbor import LexborHTMLParser

from ._dates import iso_utc
from ._markdown import escape_start, fit, inert, label, left_out, target
from ._xml import local, parse_xml
from .document import Document, Limits, Unreadable

ATOM = "http://www.w3.org/2005/Atom"
RSS1 = "http://purl.org/rss/1.0/"
DC = "http://purl.org/dc/elements/1.1/"
CONTENT = "http://purl.org/rss/1.0/modules/content/"
XML_BASE = "{http://www.w3.org/XML/1998/namespace}base"
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
SUMMARY_CHARS = 300  # two or three sentences: enough to choose which entry to follow
# Block tags (xhtml content keeps its namespace prefix: ``<html:p>``) start a new word.
_BLOCK_START = re.compile(
    r"<(?=/?(?:[\w.-]+:)?(?:p|br|div|li|h[1-6]|tr|td|th|blockquote|pre)\b)", re.I
)


SNIFF_BYTES = 4096  # room for a declaration, comments and a stylesheet line before the root
_FIRST_ELEMENT = re.compile(rb"<([A-Za-z_][\w.:-]*)")
_PROLOG_NOISE = re.compile(rb"<!--.*?-->|<\?.*?\?>|<!DOCTYPE[^>]*>", re.S)


def is_feed(data: bytes) -> bool:
    """True when ``data`` (XML served as ``text/xml`` or ``application/xml``) opens with a
    feed's root element: ``<rss>``, Atom's ``<feed>`` or RSS 1.0's ``<rdf:RDF>``."""
    head = data[:SNIFF_BYTES]
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        head = head.decode("utf-16", errors="replace").encode()
    match = _FIRST_ELEMENT.search(_PROLOG_NOISE.sub(b"", head))
    if match is None:
        return False
    name = match.group(1).rpartition(b":")[2]
    if name == b"feed":
        return ATOM.encode() in head
    return name in (b"rss", b"RDF")


@dataclass(frozen=True)
class Entry:
    """One feed entry as read: any field may be empty."""

    title: str
    link: str | None
    date: str | None
    summary: str


@dataclass(frozen=True)
class Feed:
    """A feed's own fields and its entries (a lazy iterator, read once)."""

    title: str
    author: str | None
    date: str | None
    lang: str | None
    entries: Iterator[Entry]


def read_feed(data: bytes, limits: Limits) -> Document:
    """An RSS or Atom feed as a Markdown list of entries.

    Raises ``Unreadable``: ``too_large`` for an entity bomb, ``unsupported_content`` for an
    external entity or XML that is no feed, ``corrupt_document`` for XML that does not parse.
    """
    feed = _feed(parse_xml(data, "feed"))
    items: list[str] = []
    left = 0
    for entry in feed.entries:
        if len(items) < limits.max_entries:
            items.append(_item(entry))
        else:
            left += 1
    blocks = [f"# {feed.title}"] if feed.title else []
    blocks.append("\n".join(items) if items else "_(no entries)_")
    if left:
        blocks.append(left_out(left, ("entry", "entries"), "max_entries", limits.max_entries))
    markdown, cut = fit(blocks, limits.max_chars)
    return Document(
        markdown=markdown,
        title=feed.title or None,
        author=feed.author,
        published=feed.date,
        lang=feed.lang,
        cut=cut or left > 0,
    )


def _feed(root: ET.Element) -> Feed:
    name, space = local(root.tag), root.tag.partition("}")[0].lstrip("{")
    if name == "feed" and space == ATOM:
        return _atom(root)
    if name == "rss":
        return _rss(root)
    if name == "RDF":
        return _rdf(root)
    raise Unreadable("unsupported_content", "feed:not_a_feed")


def _rss(root: ET.Element) -> Feed:
    channel = root.find("channel")
    if channel is None:
        channel = root
    base = _text(channel.find("link"))
    items = [*channel.iterfind("item"), *root.iterfind("item")]  # RSS 0.9x puts items beside
    return Feed(
        title=_plain(_text(channel.find("title"))),
        author=_text(channel.find("managingEditor"))
        or _text(channel.find(f"{{{DC}}}creator"))
        or None,
        date=iso_utc(_text(channel.find("pubDate")) or _text(channel.find("lastBuildDate"))),
        lang=_text(channel.find("language")) or None,
        entries=(_rss_entry(item, base) for item in items),
    )


def _rss_entry(item: ET.Element, base: str) -> Entry:
    link = _text(item.find("link"))
    guid = item.find("guid")
    if not link and guid is not None and guid.get("isPermaLink", "true") == "true":
        link = _text(guid)
    date = _text(item.find("pubDate")) or _text(item.find(f"{{{DC}}}date"))
    summary = _text(item.find("description")) or _text(item.find(f"{{{CONTENT}}}encoded"))
    return Entry(_plain(_text(item.find("title"))), _web(link, base), iso_utc(date), summary)


def _rdf(root: ET.Element) -> Feed:
    channel = root.find(f"{{{RSS1}}}channel")
    if channel is None:
        raise Unreadable("unsupported_content", "feed:not_a_feed")
    base = _text(channel.find(f"{{{RSS1}}}link"))
    return Feed(
        title=_plain(_text(channel.find(f"{{{RSS1}}}title"))),
        author=_text(channel.find(f"{{{DC}}}creator")) or None,
        date=iso_utc(_text(channel.find(f"{{{DC}}}date"))),
        lang=_text(channel.find(f"{{{DC}}}language")) or None,
        entries=(_rdf_entry(item, base) for item in root.iterfind(f"{{{RSS1}}}item")),
    )


def _rdf_entry(item: ET.Element, base: str) -> Entry:
    return Entry(
        title=_plain(_text(item.find(f"{{{RSS1}}}title"))),
        link=_web(_text(item.find(f"{{{RSS1}}}link")), base),
        date=iso_utc(_text(item.find(f"{{{DC}}}date"))),
        summary=_text(item.find(f"{{{RSS1}}}description")),
    )


def _atom(root: ET.Element) -> Feed:
    base = urljoin(root.get(XML_BASE, ""), _atom_link(root))
    author = root.find(f"{{{ATOM}}}author/{{{ATOM}}}name")
    return Feed(
        title=_atom_text(root.find(f"{{{ATOM}}}title")),
        author=_text(author) or None,
        date=iso_utc(_text(root.find(f"{{{ATOM}}}updated"))),
        lang=root.get(XML_LANG),
        entries=(_atom_entry(entry, base) for entry in root.iterfind(f"{{{ATOM}}}entry")),
    )


def _atom_entry(entry: ET.Element, base: str) -> Entry:
    base = urljoin(base, entry.get(XML_BASE, ""))
    date = _text(entry.find(f"{{{ATOM}}}published")) or _text(entry.find(f"{{{ATOM}}}updated"))
    summary = entry.find(f"{{{ATOM}}}summary")
    if summary is None:
        summary = entry.find(f"{{{ATOM}}}content")
    return Entry(
        title=_atom_text(entry.find(f"{{{ATOM}}}title")),
        link=_web(_atom_link(entry), base),
        date=iso_utc(date),
        summary=_atom_html(summary),
    )


def _atom_link(element: ET.Element) -> str:
    """The href of the alternate link (an Atom link without rel is one, RFC 4287 §4.2.7.2)."""
    for link in element.iterfind(f"{{{ATOM}}}link"):
        if link.get("rel", "alternate") == "alternate" and link.get("href"):
            return link.get("href", "")
    return ""


def _atom_text(element: ET.Element | None) -> str:
    return _plain(_atom_html(element))


def _atom_html(element: ET.Element | None) -> str:
    """An Atom text construct as HTML (RFC 4287 §3.1): ``xhtml`` holds elements; ``text`` is
    escaped so that its angle brackets stay text; ``html`` is markup already."""
    if element is None:
        return ""
    kind = element.get("type", "text")
    if kind == "xhtml":
        return "".join(ET.tostring(kid, encoding="unicode", method="html") for kid in element) or (
            element.text or ""
        )
    text = element.text or ""
    return text if kind == "html" else text.replace("&", "&amp;").replace("<", "&lt;")


def _text(element: ET.Element | None) -> str:
    return (element.text or "").strip() if element is not None else ""


def _web(link: str, base: str) -> str | None:
    """``link`` made absolute against ``base``, when it is an http(s) URL (never raises)."""
    try:
        url = urljoin(base, link.strip()) if link.strip() else ""
        return url if urlsplit(url).scheme in ("http", "https") and urlsplit(url).netloc else None
    except ValueError:
        return None


def _plain(html: str) -> str:
    """HTML (a title, a description) as one line of plain text."""
    if "<" not in html and "&" not in html:
        return " ".join(html.split())
    tree = LexborHTMLParser(_BLOCK_START.sub(" <", html))
    tree.strip_tags(["script", "style", "template"])
    return " ".join((tree.body.text() if tree.body else "").split())


def _item(entry: Entry) -> str:
    title = label(entry.title) or label(entry.link or "") or "(untitled)"
    line = f"- [{title}]({target(entry.link)})" if entry.link else f"- {escape_start(title)}"
    if entry.date:
        line += f" — {entry.date}"
    summary = _shorten(_plain(entry.summary))
    return f"{line}\n  {escape_start(inert(summary))}" if summary else line


def _shorten(text: str) -> str:
    if len(text) <= SUMMARY_CHARS:
        return text
    cut = text.rfind(" ", 0, SUMMARY_CHARS)
    return text[: cut if cut > SUMMARY_CHARS // 2 else SUMMARY_CHARS].rstrip() + "…"
