"""Parsing untrusted XML: entity declarations and external references are refused.

defusedxml (PSF licence) wraps the standard library's expat parser and raises on any entity
declaration (the billion-laughs and quadratic-blowup bombs need one) and any external entity
or DTD reference. A DOCTYPE that declares nothing (RSS 0.91's public DTD line) is allowed:
expat never fetches it, and old feeds still carry it.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from xml.parsers import expat

from defusedxml import DefusedXmlException, EntitiesForbidden
from defusedxml.ElementTree import fromstring

from .document import Unreadable

_DECLARATION = re.compile(rb"""\s*<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9_.:-]+)["'][^>]*\?>""")
_MULTIBYTE = {
    **dict.fromkeys(("shift_jis", "shift-jis", "sjis", "windows-31j", "ms_kanji"), "cp932"),
    **dict.fromkeys(("euc-jp", "eucjp"), "euc_jp"),
    "iso-2022-jp": "iso2022_jp",
    **dict.fromkeys(("gb2312", "gbk", "gb18030", "x-gbk"), "gb18030"),
    **dict.fromkeys(("big5", "big5-hkscs"), "big5hkscs"),
    **dict.fromkeys(("euc-kr", "ks_c_5601-1987", "windows-949"), "cp949"),
}


def parse_xml(data: bytes | str, kind: str) -> ET.Element:
    """The root element of ``data``.

    Raises ``Unreadable("too_large")`` for an internal entity declaration (how entity bombs
    expand: refused whatever it holds), ``Unreadable("unsupported_content")`` for an external
    entity or reference (a file or URL the parser would read), and
    ``Unreadable("corrupt_document")`` for XML that does not parse (truncated, not XML).
    """
    try:
        root: ET.Element = fromstring(_text_when_multibyte(data), forbid_dtd=False)
    except EntitiesForbidden as exc:
        if exc.sysid is None and exc.pubid is None:
            raise Unreadable("too_large", f"{kind}:xml_entities") from None
        raise Unreadable("unsupported_content", f"{kind}:external_entity") from None
    except DefusedXmlException:
        raise Unreadable("unsupported_content", f"{kind}:external_entity") from None
    except (ET.ParseError, ValueError, LookupError):  # Lookup: an unknown declared encoding
        raise Unreadable("corrupt_document", f"{kind}:malformed_xml") from None
    return root


def optional_xml(data: bytes | None, kind: str) -> ET.Element | None:
    """The root of a part a document reads without (properties, named styles): None when it
    is missing or damaged (``corrupt_document``), so one bad part never sinks the text.
    A hostile part (an entity bomb, an external entity) is still refused: ``Unreadable``."""
    if data is None:
        return None
    try:
        return parse_xml(data, kind)
    except Unreadable as exc:
        if exc.code != "corrupt_document":
            raise
        return None


def _text_when_multibyte(data: bytes | str) -> bytes | str:
    """``data`` decoded, its declaration dropped, when it declares an encoding expat cannot
    read (expat reads UTF-8, UTF-16 and 8-bit codecs; Shift_JIS, EUC-JP, GB2312, Big5 feeds
    exist); otherwise ``data`` as it is. Labels map as WHATWG maps them (``shift_jis`` is
    windows-31J, ``gb2312`` GB18030, ``euc-kr`` windows-949)."""
    if isinstance(data, str):
        return data
    declared = _DECLARATION.match(data[:200])
    if declared is None:
        return data
    label = declared.group(1).decode("ascii").lower()
    codec = _MULTIBYTE.get(label)
    if codec is None:
        return data
    return data[declared.end() :].decode(codec, errors="replace")


def local(tag: str) -> str:
    """A tag's name without its ``{namespace}``."""
    return tag.rpartition("}")[2]


class _Refused(Exception):
    def __init__(self, code: str, why: str) -> None:
        super().__init__(why)
        self.code = code
        self.why = why


class _RootReached(Exception):
    pass


def screen_prolog(data: bytes, kind: str) -> None:
    """Refuse a DTD in an office file's XML part, reading only up to its root element.

    The parts of DOCX, ODT and XLSX never carry a DTD; mammoth parses them with a parser
    of its own (minidom), so any declaration is refused here first: an entity declaration as
    ``too_large`` (how entity bombs expand), an external one, or any other DTD, as
    ``unsupported_content``. Raises ``Unreadable``; returns when the prolog is clean.
    """
    parser = expat.ParserCreate()
    parser.EntityDeclHandler = _on_entity
    parser.UnparsedEntityDeclHandler = _on_unparsed_entity
    parser.EndDoctypeDeclHandler = _on_doctype_end
    parser.StartElementHandler = _on_root
    try:
        parser.Parse(data, True)
    except _RootReached:
        return
    except _Refused as refused:
        raise Unreadable(refused.code, f"{kind}:{refused.why}") from None
    except (expat.ExpatError, LookupError):  # LookupError: an unknown declared encoding
        raise Unreadable("corrupt_document", f"{kind}:malformed_xml") from None


def _on_entity(
    name: str,
    is_parameter: int,
    value: str | None,
    base: str | None,
    system_id: str | None,
    public_id: str | None,
    notation: str | None,
) -> None:
    if system_id is None and public_id is None:
        raise _Refused("too_large", "xml_entities")
    raise _Refused("unsupported_content", "external_entity")


def _on_unparsed_entity(name: str, *_: object) -> None:
    raise _Refused("unsupported_content", "external_entity")


def _on_doctype_end() -> None:
    raise _Refused("unsupported_content", "dtd")


def _on_root(name: str, attrs: object) -> None:
    raise _RootReached
