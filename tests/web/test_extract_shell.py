"""Script-rendered shell pages read from their <noscript> copy, with its structure.

Each test is a small hand-made page showing one general page shape (never one site's markup).
"""

from __future__ import annotations

from specialists.extract import extract_article

POSTS = [
    f"Reply number {n}: the backup job stops after the first volume here too, and moving it "
    f"ten minutes later in the schedule fixed it on machine {n}."
    for n in range(4)
]


def test_a_noscript_copy_keeps_its_headings_and_paragraphs() -> None:
    posts = "".join(f"<p>{text}</p>" for text in POSTS)
    html = (
        "<html><body><div id='app'>Loading the forum, please wait.</div>"
        f"<noscript><main><h2>Backup job stops early</h2>{posts}</main></noscript></body></html>"
    )
    markdown = extract_article(html).markdown
    assert "## Backup job stops early" in markdown
    assert all(f"\n\n{text}" in markdown for text in POSTS)  # each its own paragraph


def test_a_noscript_copy_held_as_text_by_an_unclosed_iframe_is_read_as_markup() -> None:
    posts = "".join(f"<p>{text}</p>" for text in POSTS)
    html = (
        "<html><body><div id='app'>Loading.</div><noscript><iframe src='/pixel'>"
        f"</noscript><main><h2>Backup job stops early</h2>{posts}</main></body></html>"
    )
    markdown = extract_article(html).markdown
    assert "## Backup job stops early" in markdown
    assert all(text in markdown for text in POSTS)
