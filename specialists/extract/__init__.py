"""Readable content of a web page: the article as Markdown, and a structural outline.

Pure functions over an HTML string (no I/O), deterministic, and total: any input yields a
result, at worst an empty one. Its heuristics are named in one registry (`RULES`), and any
of them can be switched off for a block (`switched_off`), as the benchmark's ablation does.

A pure package shared by the web and browser specialists, which both import it: it imports
no I/O module (trio, httpx, os, socket, subprocess), nothing of csp_web and no specialist
(tests/test_layers.py's ``PURE`` holds it to that).
"""

from ._article import Article, article_and_outline, extract_article
from ._kind import PAGE_TYPES
from ._outline import outline
from ._rules import RULES, Rule, census, switched_off
from ._whole import document_markdown

__all__ = [
    "PAGE_TYPES",
    "RULES",
    "Article",
    "Rule",
    "article_and_outline",
    "census",
    "document_markdown",
    "extract_article",
    "outline",
    "switched_off",
]
