"""Element refs (``e12``): the labels a snapshot gives a page's elements, and when they go stale.

Playwright's AI snapshot marks elements ``[ref=e5]`` (``f1e3`` inside a frame) and resolves
such a ref to the very element object it saw, in the latest snapshot of that frame, while
the element is attached. Its numbering restarts with each document, so ``e5`` on the next
page would name another element. The agent therefore never sees Playwright's refs: each page
keeps a ``RefBook`` that hands out its own labels, ``e<n>`` counting up for the page's whole
life, never reused.

What "page state" means here: one **document generation** of the page, ended by any frame's
navigation (the main frame's or an iframe's, same-document ones included), and within it the
**latest snapshot**. A label is live while (a) it was issued by the page's latest snapshot,
(b) no frame of the page has navigated since, and (c) the element is still attached (checked
by Playwright when the action resolves it). Anything else is ``ref_stale``: an action never
falls back to another element. An element that changes in place (its text, its attributes)
keeps its identity, so an action on its ref acts on that same element.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

LABEL = re.compile(r"e[1-9][0-9]{0,8}")


class RefStale(Exception):
    """The label is not live on the page now (see the module)."""

    def __init__(self, label: str) -> None:
        super().__init__(label)
        self.label = label


@dataclass
class RefBook:
    """One page's labels (engine thread). ``labels`` maps Playwright's refs of the current
    document to labels (so an element seen by two snapshots keeps its label); ``live`` maps
    the latest snapshot's labels back to Playwright's refs."""

    document: int = 0
    issued: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    live: dict[str, str] = field(default_factory=dict)

    def new_document(self) -> None:
        """A frame navigated: every label issued so far is stale, and stays so."""
        self.document += 1
        self.labels.clear()
        self.live.clear()

    def label(self, playwright_ref: str) -> str:
        """The label of ``playwright_ref`` in this document, issuing the next one if new."""
        found = self.labels.get(playwright_ref)
        if found is None:
            self.issued += 1
            found = self.labels[playwright_ref] = f"e{self.issued}"
        return found

    def publish(self, live: dict[str, str]) -> None:
        """``live`` (label to Playwright ref) is the latest snapshot's: only these act now."""
        self.live = live

    def resolve(self, label: str) -> str:
        """Playwright's ref for a live ``label``; raises RefStale otherwise."""
        found = self.live.get(label)
        if found is None:
            raise RefStale(label)
        return found


def book_of(books: dict[Any, RefBook], page: Any) -> RefBook:
    """``page``'s book, made (and told of the page's navigations) on first use."""
    book = books.get(page)
    if book is None:
        book = books[page] = RefBook()
        page.on("framenavigated", lambda _frame: book.new_document())
    return book
