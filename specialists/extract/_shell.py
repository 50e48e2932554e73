"""What a reader without scripts sees: the page without invisible elements, or the server-
rendered copy a script-rendered shell keeps in its <noscript>."""

from __future__ import annotations

from selectolax.lexbor import LexborHTMLParser

from ._guard import defuse_nesting
from ._rules import NOSCRIPT_SHELL, on

_INVISIBLE = ("script", "style", "noscript", "template", "svg")
# A page whose visible body holds less text than this may be a script-rendered shell: its
# server-rendered copy can sit in a <noscript> (forum engines serve crawlers that way).
SHELL_MAX_CHARS = 2_000
# ...and a <noscript> is that copy when it holds this many times the visible text.
NOSCRIPT_TEXT_RATIO = 3
# Elements whose content the parser keeps as raw text: an unclosed <iframe> in a noscript
# holds the rest of the page as text, which is then the markup to read.
_RAW_TEXT = frozenset({"iframe", "noembed", "noframes", "xmp", "textarea", "title", "style"})


def readable_tree(tree: LexborHTMLParser) -> LexborHTMLParser:
    """`tree` without invisible elements, or the page inside its <noscript> for a shell page.

    Script-rendered pages show an empty shell to a reader without scripts and keep their
    server-rendered copy in a <noscript>; a noscript is that copy when the visible body is
    short and the noscript holds NOSCRIPT_TEXT_RATIO times its text. The copy is read as
    markup: the noscript's elements when the parser built them (its headings, posts and
    links), else its text, which is then the markup itself.
    """
    noscript = max(tree.css("noscript"), key=lambda node: len(node.text()), default=None)
    copy = noscript.text() if noscript is not None else ""
    markup = copy
    if noscript is not None and any(kid.tag not in _RAW_TEXT for kid in noscript.iter()):
        markup = noscript.inner_html or copy
    tree.strip_tags(list(_INVISIBLE))  # so the page's text length counts readable text only
    if len(copy) < NOSCRIPT_TEXT_RATIO * 100:  # most noscripts hold a tracking pixel
        return tree
    body = tree.body
    visible = len(body.text()) if body is not None else 0
    if visible >= SHELL_MAX_CHARS or len(copy) < NOSCRIPT_TEXT_RATIO * max(visible, 100):
        return tree
    if not on(NOSCRIPT_SHELL):
        return tree
    inner = LexborHTMLParser(defuse_nesting(f"<body>{markup}</body>"))
    inner.strip_tags(list(_INVISIBLE))
    return inner
