"""Readable content of a web page: the article as Markdown, and a structural outline.

Pure functions over an HTML string (no I/O), deterministic, and total: any input yields a
result, at worst an empty one.
"""

from ._article import Article, extract_article
from ._kind import PAGE_TYPES
from ._outline import outline

__all__ = ["PAGE_TYPES", "Article", "extract_article", "outline"]
