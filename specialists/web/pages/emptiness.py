"""Why a page that loaded yields no text (issue 24: never ``STATUS OK`` with empty content).

The reason travels in the fetch reply as ``ERROR empty_content:<why>`` on a PARTIAL (SPEC R-2):

    empty_body                          the body holds nothing but whitespace
    script_only,render_off              an HTML page whose text is built by its scripts, not
                                        rendered: RENDER never (or web.fetch.render: never)
    script_only,render_unavailable      the same, and no Chromium to render it (rendering.py)
    script_only,render_failed:<why>     the same, and its auto render failed for the renderer's
                                        sake (rendering.py: render_timeout, browser_unavailable,
                                        page_crashed, render_tls_verify_failed...)
    rendered_empty                      the browser rendered the page and it still has no text
                                        (its scripts failed, or the guard refused what they
                                        asked for)
    no_text                             markup with no readable text and no scripts

An app shell left as served (``appshell.py`` told it; RENDER never, no Chromium, or its render
failed) whose text is only its title and a placeholder its scripts would replace ("Loading...",
"Please wait") is empty too: ``is_placeholder``. The rest of its view is still sent.
"""

from __future__ import annotations

import re

EMPTY_BODY = "empty_body"
SCRIPT_ONLY = "script_only"  # rendering.py adds why it was not rendered
RENDERED_EMPTY = "rendered_empty"
NO_TEXT = "no_text"
# An app shell's tell: an external or inline script, or a <noscript> asking for JavaScript.
_SCRIPTED = re.compile(r"<script[\s>]|<noscript[\s>]", re.I)
# Fewer words than this past an app shell's title are a placeholder, not content: the ones
# shells show run 1 to 7 words ("Loading...", "Just a moment...", "This page requires
# JavaScript to work properly"), and of the 688 dev corpus pages the fewest words past the
# title among those with a shell tell is 20 (a schedule page's lead): twice this.
PLACEHOLDER_WORDS = 10
_TITLE_LINE = re.compile(r"\A\s*#{1,6} [^\n]*")
_WORD = re.compile(r"\w+")


def empty_why(kind: str, text: str) -> str:
    """The reason a page of ``kind`` whose decoded body is ``text`` yields no readable text."""
    if not text.strip():
        return EMPTY_BODY
    if kind == "html" and _SCRIPTED.search(text):
        return SCRIPT_ONLY
    return NO_TEXT


def is_empty(content: str) -> bool:
    """Whether ``content`` (a view fetch would send) holds no readable character."""
    return not content.strip()


def is_placeholder(content: str) -> bool:
    """Whether ``content``, the view of an app shell left as served, holds no more than a
    title heading and fewer than ``PLACEHOLDER_WORDS`` words besides: what its scripts
    would replace. Judge only a page that was told a shell: a short page as written is
    content."""
    rest = _TITLE_LINE.sub("", content, count=1)
    return len(_WORD.findall(rest)) < PLACEHOLDER_WORDS
