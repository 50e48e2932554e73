"""Text as a reader sees it: invisible soft hyphens gone, Unicode composed (NFC).

A soft hyphen (U+00AD) only marks where a word may break, so "extra\\u00adordinary" is one
word to a reader but two `\\w+` runs to any tokeniser; decomposed accents ("e" + U+0301)
look like "é" but match no search for it. Both are fixed once, on the finished text.
"""

from __future__ import annotations

import html
import re
import unicodedata

SOFT_HYPHEN = "\u00ad"
# An entity still spelt out after the parser decoded the attribute once: the page encoded
# it twice ("&amp;amp;", "&amp;#8217;"), as many CMS templates do with their descriptions.
_ENTITY = re.compile(r"&(#\d{1,7}|#[xX][0-9a-fA-F]{1,6}|[a-zA-Z][a-zA-Z0-9]{1,31});")


def readable(text: str) -> str:
    """`text` without soft hyphens and in NFC."""
    if SOFT_HYPHEN in text:
        text = text.replace(SOFT_HYPHEN, "")
    if text.isascii() or unicodedata.is_normalized("NFC", text):
        return text
    return unicodedata.normalize("NFC", text)


def decoded(text: str) -> str:
    """A metadata value with the entities it still spells out decoded, made `readable`."""
    if _ENTITY.search(text):
        text = html.unescape(text)
    return readable(text)
