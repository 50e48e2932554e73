"""``reading.read_page``: every view of an HTML page, the article and the outline from one
parse, each as the extractor, the outline and the head reader make it alone."""

from __future__ import annotations

import gzip

import pytest

from bench.extraction import DEFAULT_CORPUS
from specialists.extract import extract_article, outline
from specialists.web.pages.appshell import shell_reason
from specialists.web.pages.headmeta import read_head
from specialists.web.pages.reading import read_page
from tests.web.pages_support import ARTICLE

URL = "https://origin.test/page"
CORPUS = DEFAULT_CORPUS / "html"
# The outline previews a paragraph's text as parsed; the extractor then strips scripts from
# the tree they share, so an outline read after it would lose "var hidden".
SCRIPTED = (
    "<html><head><title>T</title></head><body><main><p>Visible words"
    "<script>var hidden = 1;</script> here</p></main></body></html>"
)
SHELL = '<html><head></head><body><div id="root"></div><script src="/app.js"></script></body>'


def each_view_alone(html: str) -> tuple[object, ...]:
    article = extract_article(html, url=URL)
    head = read_head(html, base_url=URL)
    return head, article, outline(html), shell_reason(html, article.markdown)


@pytest.mark.parametrize("html", [ARTICLE, SCRIPTED, SHELL, "", "   ", "<p>no head"])
def test_reading_a_page_gives_what_each_reader_gives_alone(html: str) -> None:
    reading = read_page(html, URL)
    assert (reading.head, reading.article, reading.outline, reading.shell) == each_view_alone(html)


def test_the_outline_is_read_before_the_extractor_narrows_the_shared_tree() -> None:
    assert (
        read_page(SCRIPTED, URL).outline
        == "title: T\nmain\n  p: Visible words var hidden = 1; here"
    )


@pytest.mark.skipif(
    not CORPUS.is_dir(), reason=f"the evaluation corpus {CORPUS} is not beside this clone"
)
def test_reading_the_dev_corpus_gives_what_each_reader_gives_alone() -> None:
    for path in sorted(CORPUS.glob("*.html.gz"))[:20]:
        html = gzip.decompress(path.read_bytes()).decode("utf-8", "replace")
        reading = read_page(html, URL)
        views = (reading.head, reading.article, reading.outline, reading.shell)
        assert views == each_view_alone(html), path.name
