"""Documents as Markdown: PDF, office files, sheets and feeds.

Pure functions over bytes (no I/O), one module per format, each ``read_<format>(data, limits)
-> Document`` (``document.py``). Shared by fetch and the document ops (and the browser's
downloads through fetch); it imports no I/O module, nothing of csp_web and no specialist
(tests/test_layers.py's ``PURE`` holds it to that).
"""

from .document import (
    PAGE_MARKER,
    UNREADABLE_PAGE,
    UNREADABLE_SHEET,
    Document,
    Limits,
    Unreadable,
    unreadable_pages,
    unreadable_sheets,
)

__all__ = [
    "PAGE_MARKER",
    "UNREADABLE_PAGE",
    "UNREADABLE_SHEET",
    "Document",
    "Limits",
    "Unreadable",
    "unreadable_pages",
    "unreadable_sheets",
]
