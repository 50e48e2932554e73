"""The extractor on pages other than news articles: shells, forums, listings, product pages.

Each test is a small hand-made page showing one general page shape (never one site's markup).
"""

from __future__ import annotations

from specialists.web.extract import extract_article

POSTS = [
    "I have been trying to get the backup job to run every night, but it stops after the "
    "first volume and the log says nothing useful about why it gave up.",
    "Check whether the second volume is mounted when the job starts; the scheduler runs "
    "before the automounter on some systems, and then the job sees an empty directory.",
    "That was it, thank you. I moved the job to run ten minutes later and it has worked "
    "every night since, including the weekly full backup on Sunday.",
]


def test_a_script_shell_page_is_read_from_its_noscript_copy() -> None:
    copy = "".join(f"<div class='post'><p>{text}</p></div>" for text in POSTS)
    html = (
        "<html><body><div id='app'>Loading the forum, please wait.</div>"
        f"<noscript>{copy}</noscript></body></html>"
    )
    markdown = extract_article(html).markdown
    assert all(text in markdown for text in POSTS)
    assert "Loading" not in markdown


def test_a_noscript_on_a_full_page_is_still_ignored() -> None:
    prose = "".join(f"<p>{text}</p>" for text in POSTS * 6)
    html = (
        f"<html><body><article>{prose}</article>"
        "<noscript><p>Please enable JavaScript to see the comments, which need it.</p>"
        "</noscript></body></html>"
    )
    assert "enable JavaScript" not in extract_article(html).markdown


def test_react_streamed_segments_hidden_until_scripts_move_them_are_kept() -> None:
    html = (
        "<html><body><main><template id='B:0'></template></main>"
        f"<div hidden id='S:0'><article><p>{POSTS[0]}</p><p>{POSTS[1]}</p></article></div>"
        f"<div hidden id='other'><p>{POSTS[2]}</p></div></body></html>"
    )
    markdown = extract_article(html).markdown
    assert POSTS[0] in markdown and POSTS[1] in markdown
    assert POSTS[2] not in markdown


def test_the_description_stands_in_for_a_body_that_says_less() -> None:
    head = f'<meta name="description" content="{POSTS[0]}">'
    html = f"<html><head>{head}</head><body><div id='app'>Loading…</div></body></html>"
    assert extract_article(html).markdown == POSTS[0]
