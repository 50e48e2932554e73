"""Whether served HTML is an app shell: a page whose text its scripts write (issue 24).

General tells, never a list of sites; each is judged only when the extracted text is tiny
(under ``TINY_TEXT_CHARS``), so a server-rendered page with scripts is read as served:

    root_div       an empty mount point (``div#root``, ``#app`` or ``#__next``) and a script
    noscript       a ``<noscript>`` asking for JavaScript
    script_heavy   script bytes at least ``SCRIPT_RATIO`` times the text's characters

The name of the first tell that holds is the page's ``RENDER_REASON``.
"""

from __future__ import annotations

import re

# Below this many characters of extracted text a page may be a shell (a short real page with
# none of the tells below is still read as served).
TINY_TEXT_CHARS = 500
# Script bytes per character of text past which the scripts, not the markup, make the page.
SCRIPT_RATIO = 20
_SCRIPT = re.compile(r"<script\b[^>]*>(.*?)</script\s*>", re.I | re.S)
_SCRIPT_SRC = re.compile(r"<script\b[^>]*\bsrc\s*=", re.I)
# An empty mount point: the root element a framework fills (children are only whitespace).
_ROOT = re.compile(
    r"<div\b[^>]*\bid\s*=\s*[\"']?(?:root|app|__next)[\"'\s>][^>]*>?\s*</div\s*>", re.I
)
_NOSCRIPT = re.compile(r"<noscript\b[^>]*>(.*?)</noscript\s*>", re.I | re.S)
# A script fetched by src weighs what a bundle does: count it as this many bytes.
EXTERNAL_SCRIPT_BYTES = 10_000


def shell_reason(html: str, text: str) -> str | None:
    """The tell that ``html``, whose extracted text is ``text``, is an app shell, or None."""
    chars = len(text.strip())
    if chars >= TINY_TEXT_CHARS:
        return None
    scripts = _SCRIPT.findall(html)
    if not scripts:
        return None
    if _ROOT.search(html):
        return "root_div"
    if any("javascript" in body.lower() for body in _NOSCRIPT.findall(html)):
        return "noscript"
    weight = sum(len(body) for body in scripts)
    weight += EXTERNAL_SCRIPT_BYTES * len(_SCRIPT_SRC.findall(html))
    if weight >= SCRIPT_RATIO * max(chars, 1):
        return "script_heavy"
    return None
