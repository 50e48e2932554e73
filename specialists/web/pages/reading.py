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

import dataclasses
from dataclasses import dataclass

from csp_web.net.result import readable
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
    """Every view of ``html`` (decoded) fetched from ``url``, which makes its links absolute,
    each ``readable`` (a control character written as a reference, ``&#27;``, is one once
    parsed). Pure; never raises."""
    article, outline = article_and_outline(html, url=url)
    head = read_head(html, base_url=url)
    shell = shell_reason(html, article.markdown)
    return Reading(_readable_head(head), _readable_article(article), readable(outline), shell)


def _readable_article(article: Article) -> Article:
    return dataclasses.replace(
        article,
        title=_maybe(article.title),
        markdown=readable(article.markdown),
        description=_maybe(article.description),
    )


def _readable_head(head: Head) -> Head:
    meta = {key: readable(value) for key, value in head.meta.items()}
    return Head({key: value for key, value in meta.items() if value.strip()}, head.refresh)


def _maybe(text: str | None) -> str | None:
    return None if text is None else readable(text).strip() or None
