"""Word processor documents as Markdown: DOCX through mammoth, ODT through ``_odf``.

Both become simple HTML (headings, paragraphs, lists, tables, links), which the extractor's
``document_markdown`` renders as it renders a page, whole: a document has no chrome to prune.
mammoth (BSD-2) reads Word's styles and numbering into headings and lists; images are left
out (an agent reads text, and decoding them would cost memory for nothing). TITLE, author,
date and language come from the core properties (``docProps/core.xml``, ODT's ``meta.xml``),
the title falling back to the first heading.

Every XML part is screened for a DTD before any parser sees it (``_xml.screen_prolog``) and
the zip's declared sizes are judged first (``_zip.open_zip``).
"""

from __future__ import annotations

import io
import re
import zipfile

import mammoth

from specialists.extract import document_markdown

from ._dates import iso_utc
from ._markdown import fit
from ._odf import odt_html
from ._xml import local, parse_xml, screen_prolog
from ._zip import open_zip, read_member
from .document import Document, Limits, Unreadable

# Word's own title styles, which mammoth's default map leaves as paragraphs.
_STYLE_MAP = "p[style-name='Title'] => h1:fresh\np[style-name='Subtitle'] => p:fresh"
_HEADING = re.compile(r"^#{1,6} (.+)$", re.M)
_CORE = "docProps/core.xml"


def read_docx(data: bytes, limits: Limits) -> Document:
    """A DOCX document as Markdown.

    Raises ``Unreadable``: ``too_large`` for a zip bomb or an XML entity bomb,
    ``unsupported_content`` for an external entity, ``corrupt_document`` for bytes that are
    not a readable DOCX (a damaged zip, no ``word/document.xml``, broken XML).
    """
    archive = _screened(data, "DOCX")
    if "word/document.xml" not in archive.namelist():
        raise Unreadable("corrupt_document", "DOCX holds no word/document.xml")
    try:
        result = mammoth.convert_to_html(
            io.BytesIO(data), style_map=_STYLE_MAP, convert_image=_no_image
        )
    except Exception as exc:  # mammoth's errors on damaged parts are of any type
        raise Unreadable("corrupt_document", f"DOCX is not readable ({exc!r})") from None
    core = read_member(archive, _CORE, "DOCX")
    return _document(result.value, _properties(core, "DOCX"), limits)


def read_odt(data: bytes, limits: Limits) -> Document:
    """An OpenDocument text (ODT) as Markdown; raises ``Unreadable`` as ``read_docx`` does."""
    archive = _screened(data, "ODT")
    content = read_member(archive, "content.xml", "ODT")
    if content is None:
        raise Unreadable("corrupt_document", "ODT holds no content.xml")
    styles = read_member(archive, "styles.xml", "ODT")
    html = odt_html(parse_xml(content, "ODT"), parse_xml(styles, "ODT") if styles else None)
    meta = read_member(archive, "meta.xml", "ODT")
    return _document(html, _properties(meta, "ODT"), limits)


def _screened(data: bytes, kind: str) -> zipfile.ZipFile:
    """The zip, its size budget met and each XML part's prolog free of a DTD."""
    archive = open_zip(data, kind)
    for name in archive.namelist():
        if name.endswith((".xml", ".rels")):
            part = read_member(archive, name, kind)
            screen_prolog(part or b"", f"{kind} part {name}")
    return archive


def _no_image(image: object) -> list[object]:
    return []


def _document(html: str, properties: dict[str, str], limits: Limits) -> Document:
    markdown = document_markdown(html)
    title = properties.get("title") or _first_heading(markdown)
    text, cut = fit(markdown.split("\n\n") if markdown else [], limits.max_chars)
    return Document(
        markdown=text,
        title=title,
        author=properties.get("creator") or properties.get("initial-creator"),
        published=iso_utc(properties.get("created") or properties.get("creation-date") or ""),
        lang=properties.get("language"),
        cut=cut,
    )


def _first_heading(markdown: str) -> str | None:
    match = _HEADING.search(markdown)
    return match.group(1).strip() if match else None


def _properties(xml: bytes | None, kind: str) -> dict[str, str]:
    """The Dublin Core and meta fields of a core-properties part, by local name (the first
    non-empty of each), or nothing when the part is missing."""
    if xml is None:
        return {}
    found: dict[str, str] = {}
    for element in parse_xml(xml, kind).iter():
        if isinstance(element.tag, str) and element.text and element.text.strip():
            found.setdefault(local(element.tag), " ".join(element.text.split()))
    return found
