"""Reading an HTML page: everything a snapshot keeps of it, in one call.

    reading = read_page(html, "https://example.com/article")

The article (the extractor's Markdown, title, description, words, page type) and the outline
come from one parse of the document (``extract.article_and_outline``); the head's metadata
from ``headmeta.read_head``, which reads the head alone, cut at its end (seed 003: "parses
<meta> OG tags from <head> only"): the document's tree would not do, its parser moves the
head's tags into the body after a stray element (a tracking pixel's ``<noscript><img>``), and
the tags of 38 of the 688 dev corpus pages would be lost. Pure and CPU-bound (no I/O): the
fetch path runs it in a worker, so a process pool can run it as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from specialists.extract import Article, article_and_outline

from .appshell import shell_reason
from .headmeta import Head, read_head


@dataclass(frozen=True)
class Reading:
    """What ``read_page`` makes of a page: its ``head`` (``headmeta.Head``), its ``article``
    (``extract.Article``), its ``outline`` (EXTRACT html) and ``shell``, the tell that the
    served HTML is an app shell (``appshell.py``), None when it is not one."""

    head: Head
    article: Article
    outline: str
    shell: str | None


def read_page(html: str, url: str) -> Reading:
    """Every view of ``html`` (decoded) fetched from ``url``, which makes its links absolute.
    Pure; never raises."""
    article, outline = article_and_outline(html, url=url)
    head = read_head(html, base_url=url)
    return Reading(head, article, outline, shell_reason(html, article.markdown))
