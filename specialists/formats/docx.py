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

import mammoth

from specialists.extract import document_markdown

from ._dates import iso_utc
from ._markdown import fit
from ._odf import odt_html
from ._props import properties
from ._xml import optional_xml, parse_xml
from ._zip import open_office, optional_member, read_member
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
    archive = open_office(data, "docx")
    if "word/document.xml" not in archive.namelist():
        raise Unreadable("corrupt_document", "docx:missing_part")
    try:
        result = mammoth.convert_to_html(
            io.BytesIO(data), style_map=_STYLE_MAP, convert_image=_no_image
        )
    except Exception:  # mammoth's errors on damaged parts are of any type
        raise Unreadable("corrupt_document", "docx:unreadable") from None
    core = optional_member(archive, _CORE, "docx")
    return _document(result.value, properties(core, "docx"), limits)


def read_odt(data: bytes, limits: Limits) -> Document:
    """An OpenDocument text (ODT) as Markdown; raises ``Unreadable`` as ``read_docx`` does."""
    archive = open_office(data, "odt")
    content = read_member(archive, "content.xml", "odt")
    if content is None:
        raise Unreadable("corrupt_document", "odt:missing_part")
    styles = optional_xml(optional_member(archive, "styles.xml", "odt"), "odt")
    html = odt_html(parse_xml(content, "odt"), styles)
    meta = optional_member(archive, "meta.xml", "odt")
    return _document(html, properties(meta, "odt"), limits)


def _no_image(image: object) -> list[object]:
    return []


def _document(html: str, fields: dict[str, str], limits: Limits) -> Document:
    markdown = document_markdown(html, url=limits.base_url)
    title = fields.get("title") or _first_heading(markdown)
    text, cut = fit(markdown.split("\n\n") if markdown else [], limits.max_chars)
    return Document(
        markdown=text,
        title=title,
        author=fields.get("creator") or fields.get("initial-creator"),
        published=iso_utc(fields.get("created") or fields.get("creation-date") or ""),
        lang=fields.get("language"),
        cut=cut,
    )


def _first_heading(markdown: str) -> str | None:
    match = _HEADING.search(markdown)
    return match.group(1).strip() if match else None
