"""Which encoding a body is in, decided as browsers decide it (WHATWG HTML §13.2.3, Encoding).

    encoding = sniff_encoding(body, declared="windows-1251", html=True)
    text = decode_body(body, declared=None, html=True)

Order: a byte order mark; the HTTP charset; for HTML, a ``<meta>`` prescan of the first 1,024
bytes; then, only for bytes nobody declared, detection: valid UTF-8 is UTF-8, anything else
is what charset-normalizer finds most likely (MIT; already installed as a requests and httpx
dependency). A declaration, even a wrong one, is obeyed while its own bytes do not prove it
wrong: a browser would show the same mojibake, and detection that outvotes a page's own word
is a spoofing lever. The one exception is a declaration the bytes cannot be read in at all
(``garbled``: at least ``MIN_DETECT_HIGH_BYTES`` U+FFFD, and at least ``GARBLED_SHARE`` of
the non-ASCII characters: windows-1251 or Shift_JIS labelled UTF-8): then the meta prescan,
then detection, are tried, and the first that reads the bytes cleanly (``CLEAN_SHARE``) is
used; a page answering only U+FFFD tells an agent nothing. Detection is tried only on
evidence enough (``MIN_REREAD_HIGH_BYTES``) and for a non-Latin script: Latin text keeps
its visible U+FFFD rather than take another code page's wrong letters.

Labels map to codecs as the WHATWG Encoding standard's table does where Python differs
(``iso-8859-1`` and ``ascii`` are windows-1252, ``gb2312`` is GB18030, ``euc-kr`` is
windows-949, ``shift_jis`` is windows-31J); the ``replacement`` labels decode to one U+FFFD,
and labels outside the standard (``utf-7``, bytes codecs such as ``base64``) are ignored.
"""

from __future__ import annotations

import codecs
import re

import charset_normalizer

PRESCAN_BYTES = 1024  # WHATWG HTML §13.2.3.2: the prescan reads the first 1,024 bytes
DETECT_BYTES = 64 * 1024  # detection reads this much: enough to tell, bounded in time
FALLBACK = "cp1252"  # WHATWG's default for an undeclared page in most locales
# Fewer non-ASCII bytes than this say too little to tell one legacy encoding from another
# (charset-normalizer reads b"ok \xff" as cp1006): the default then. A sentence of Polish or
# French holds a dozen.
MIN_DETECT_HIGH_BYTES = 8
# A declaration proved wrong (``garbled``) is replaced by detection's guess only on this many
# non-ASCII bytes or more, and only when the guess is a non-Latin script's encoding: else the
# U+FFFD stay, visible damage where a wrong guess would put wrong letters silently. Measured
# (text prefixes of windows-1251, Shift_JIS, GB18030, EUC-KR, Greek): detection reads them
# right from 24 bytes (GB18030 under 24 is taken for windows-949). Latin text has no such
# count: of the 107 dev corpus pages re-encoded in windows-1252, detection misread 21 (as
# windows-1250, ISO-8859-10, Mac Roman) at 10 to 73 non-ASCII bytes, and French, Spanish
# and Portuguese sentences came back windows-1250 at 8 to 20; and a Latin page read as UTF-8
# loses only its accented letters, a Cyrillic or CJK page all of its text.
MIN_REREAD_HIGH_BYTES = 24
# A declaration decoding to U+FFFD for this share of its non-ASCII characters (or more) is
# proved wrong by its own bytes. Legacy text read as UTF-8 is 76 % (Shift_JIS) to 100 %
# (windows-1251) U+FFFD, multi-byte text keeping a few pairs that happen to be valid UTF-8; a
# real UTF-8 page with stray bad bytes holds them among its good characters (a dozen in a
# paragraph of Russian: 9 %), and a CJK page wrongly labelled windows-1252, which browsers
# show as mojibake and this module obeys, is at most 11 % (its five unassigned bytes).
GARBLED_SHARE = 0.5
# A second reading is used only when clean: U+FFFD for at most this share of its non-ASCII
# characters (a legacy page's odd unassigned byte), else the declared reading stands.
CLEAN_SHARE = 0.01
# Detection picks among the WHATWG Encoding standard's encodings only: the web has no others.
WEB_ENCODINGS = (
    "utf_8",
    *(f"iso8859_{n}" for n in (2, 3, 4, 5, 6, 7, 8, 10, 13, 14, 15, 16)),
    *(f"cp125{n}" for n in range(9)),
    *("ibm866", "koi8_r", "koi8_u", "mac_roman", "mac_cyrillic", "cp874"),
    *("gb18030", "big5hkscs", "euc_jp", "cp932", "cp949"),
)
_HIGH = re.compile(rb"[\x80-\xff]")
# Single-byte encodings of Latin script (their codec names as ``codec_for`` gives them).
_LATIN = frozenset(
    codecs.lookup(name).name
    for name in (
        *(f"iso8859_{n}" for n in (2, 3, 4, 9, 10, 13, 14, 15, 16)),
        *("cp1250", "cp1252", "cp1254", "cp1257", "cp1258", "mac_roman"),
    )
)
REPLACEMENT = "replacement"
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-zA-Z0-9_.:-]+)""", re.I)
_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
# WHATWG labels whose meaning differs from Python's codec of the same name.
_LABELS = {
    **dict.fromkeys(
        ("ascii", "us-ascii", "iso-8859-1", "iso8859-1", "latin1", "l1", "iso_8859-1"), "cp1252"
    ),
    **dict.fromkeys(("windows-1252", "x-cp1252", "cp1252", "cp819", "ibm819"), "cp1252"),
    **dict.fromkeys(("iso-8859-9", "latin5", "l5", "iso8859-9", "windows-1254"), "cp1254"),
    **dict.fromkeys(("tis-620", "iso-8859-11", "windows-874", "dos-874"), "cp874"),
    **dict.fromkeys(("gb2312", "gbk", "x-gbk", "chinese", "csgb2312", "gb18030"), "gb18030"),
    **dict.fromkeys(("euc-kr", "ks_c_5601-1987", "korean", "windows-949", "cp949"), "cp949"),
    **dict.fromkeys(
        ("shift_jis", "shift-jis", "sjis", "ms_kanji", "x-sjis", "windows-31j", "csshiftjis"),
        "cp932",
    ),
    **dict.fromkeys(("big5", "big5-hkscs", "cn-big5", "x-x-big5"), "big5hkscs"),
    **dict.fromkeys(("utf-16", "utf-16le"), "utf-16-le"),
    **dict.fromkeys(
        ("iso-2022-kr", "iso-2022-cn", "iso-2022-cn-ext", "hz-gb-2312", "csiso2022kr"),
        REPLACEMENT,
    ),
}
_REFUSED = frozenset({"utf-7", "x-user-defined"})  # not in WHATWG: utf-7 smuggles markup


def codec_for(label: str | None) -> str | None:
    """The codec a charset label names, as WHATWG reads it; None for no label, an unknown
    one, or one the standard does not have."""
    if not label:
        return None
    name = label.strip().lower()
    if name in _LABELS:
        return _LABELS[name]
    try:
        info = codecs.lookup(name)
    except LookupError:
        return None
    if info.name in _REFUSED or not getattr(info, "_is_text_encoding", True):
        return None
    return info.name


def sniff_encoding(body: bytes, *, declared: str | None, html: bool) -> tuple[str, int]:
    """(codec, bytes of BOM to skip) for ``body``: BOM, ``declared`` (the HTTP charset),
    the meta prescan when ``html``, then detection. Pure and CPU-bound: call it off the event
    loop for large bodies."""
    for bom, encoding in _BOMS:
        if body.startswith(bom):
            return encoding, len(bom)
    header = codec_for(declared)
    if header is not None:
        return header, 0
    if html:
        meta = codec_for(_meta_label(body))
        if meta is not None:
            # WHATWG: a meta that says UTF-16 in bytes read as ASCII means UTF-8.
            return ("utf-8" if meta.startswith("utf-16") else meta), 0
    return detect(body), 0


def detect(body: bytes) -> str:
    """The most likely codec of undeclared ``body``: UTF-8 when it is valid UTF-8 (ASCII
    included), else charset-normalizer's best guess among WEB_ENCODINGS from its first
    DETECT_BYTES, else (no guess, or too few non-ASCII bytes to tell) windows-1252."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        return "utf-8"
    sample = body[:DETECT_BYTES]
    if len(_HIGH.findall(sample)) < MIN_DETECT_HIGH_BYTES:
        return FALLBACK
    best = charset_normalizer.from_bytes(sample, cp_isolation=list(WEB_ENCODINGS)).best()
    guessed = codec_for(best.encoding) if best is not None else None
    return guessed or FALLBACK


def decode_body(body: bytes, *, declared: str | None, html: bool) -> str:
    """``body`` as text in its sniffed encoding, or, when that reading is ``garbled``, in the
    meta's or the detected encoding that reads it cleanly; undecodable bytes become
    U+FFFD. A byte order mark is never second-guessed."""
    encoding, skip = sniff_encoding(body, declared=declared, html=html)
    if encoding == REPLACEMENT:
        return "\ufffd" if body else ""
    text = body[skip:].decode(encoding, errors="replace")
    if skip or not garbled(text):
        return text
    return _reread(body, html, tried=encoding) or text


def garbled(text: str) -> bool:
    """Whether ``text`` is mostly U+FFFD where it is not ASCII: at least
    ``MIN_DETECT_HIGH_BYTES`` of them (fewer say too little to detect anything better) and at
    least ``GARBLED_SHARE`` of its non-ASCII characters."""
    bad = text.count("\ufffd")
    return bad >= MIN_DETECT_HIGH_BYTES and bad >= GARBLED_SHARE * _non_ascii(text)


def _clean(text: str) -> bool:
    return text.count("\ufffd") <= CLEAN_SHARE * _non_ascii(text)


def _non_ascii(text: str) -> int:
    return len(text) - len(text.encode("ascii", "ignore"))


def _reread(body: bytes, html: bool, *, tried: str) -> str | None:
    """``body`` read in the meta's encoding (HTML) or else the detected one, whichever comes
    first of those not yet ``tried`` that reads it cleanly; None when neither does."""
    candidates = [codec_for(_meta_label(body)) if html else None, _detected_script(body)]
    for encoding in dict.fromkeys(c for c in candidates if c is not None and c != tried):
        if encoding == REPLACEMENT or encoding.startswith("utf-16"):
            continue
        text = body.decode(encoding, errors="replace")
        if _clean(text):
            return text
    return None


def _detected_script(body: bytes) -> str | None:
    """``detect``'s codec for ``body`` when it has ``MIN_REREAD_HIGH_BYTES`` non-ASCII bytes
    to tell by and names a non-Latin script's encoding, else None."""
    if len(_HIGH.findall(body[:DETECT_BYTES])) < MIN_REREAD_HIGH_BYTES:
        return None
    encoding = detect(body)
    return None if encoding in _LATIN else encoding


def _meta_label(body: bytes) -> str | None:
    match = _META_CHARSET.search(body[:PRESCAN_BYTES])
    return match.group(1).decode("ascii") if match else None
