"""The snapshot text's rewriting and paging, and the ref book, without a browser."""

from __future__ import annotations

import pytest

from specialists.browser.refs import RefBook, RefStale
from specialists.browser.snapshot_text import Box, page_of, rewrite

PLAYWRIGHT = "\n".join(
    (
        "- generic [active] [ref=e1] [box=8,8,1264,600]:",
        '  - link "Home" [ref=e3] [cursor=pointer] [box=8,30,39,17]:',
        "    - /url: /a",
        """  - 'button "a: b''s [ref=e9]" [ref=e7] [cursor=pointer] [box=1,2,3,4]': x""",
        "  - iframe [ref=e4] [box=100,200,300,150]:",
        "    - generic [ref=f1e1] [box=0,0,300,150]:",
        '      - button "In frame" [ref=f1e3] [box=8,50,65,21]',
        "      - paragraph [ref=f1e2]: x [ref=e1]",
        '  - text: "[ref=e5]"',
        "  - generic [ref=e8] [cursor=pointer]: clicky",
        "  - button [ref=e6] [box=10,500,0,0]",
    )
)


def book_labels() -> RefBook:
    book = RefBook()
    book.issued = 40  # labels count on from earlier documents
    return book


def test_rewrite_labels_refs_and_shows_the_pages_own_ref_text_as_page_ref() -> None:
    """A page that prints ``[ref=e1]`` in a name or a text cannot show a model a ref: only
    the labels rewrite writes read ``[ref=``."""
    book = book_labels()
    out = rewrite(PLAYWRIGHT, book.label, max_refs=100)
    assert out.text == "\n".join(
        (
            "- generic [active] [ref=e41]:",
            '  - link "Home" [ref=e42]:',
            "    - /url: /a",
            """  - 'button "a: b''s [page-ref=e9]" [ref=e43]': x""",
            "  - iframe [ref=e44]:",
            "    - generic [ref=e45]:",
            '      - button "In frame" [ref=e46]',
            "      - paragraph [ref=e47]: x [page-ref=e1]",
            '  - text: "[page-ref=e5]"',
            "  - generic [ref=e48] [cursor=pointer]: clicky",
            "  - button [ref=e49]",
        )
    )
    assert out.live == {
        "e41": "e1",
        "e42": "e3",
        "e43": "e7",
        "e44": "e4",
        "e45": "f1e1",
        "e46": "f1e3",
        "e47": "f1e2",
        "e48": "e8",
        "e49": "e6",
    }
    assert out.cut is False
    # Actionable elements with a size; a frame's own are moved by the iframe's box.
    assert out.boxes == [
        Box("e42", 8, 30, 39, 17),
        Box("e43", 1, 2, 3, 4),
        Box("e46", 108, 250, 65, 21),
    ]


def test_rewrite_cuts_before_the_line_past_the_ref_cap() -> None:
    at_cap = rewrite(PLAYWRIGHT, book_labels().label, max_refs=9)
    assert (len(at_cap.live), at_cap.cut) == (9, False)
    over = rewrite(PLAYWRIGHT, book_labels().label, max_refs=8)
    assert (len(over.live), over.cut) == (8, True)
    assert over.text.endswith("  - generic [ref=e48] [cursor=pointer]: clicky")


@pytest.mark.parametrize(
    "line",
    [
        '- button "unclosed [ref=e1]',  # a name that does not end
        "- button [ref=e1] trailing words",  # text after the key without its colon
        "- 'button [ref=e1]",  # an unclosed quoted key
        '- button "a" [ref=e1] [ref=e2] junk',
    ],
)
def test_a_line_of_unknown_shape_holding_a_ref_is_dropped_not_passed_on(line: str) -> None:
    out = rewrite(f"- heading [ref=e2]\n{line}", RefBook().label, max_refs=10)
    assert out.text == "- heading [ref=e1]"
    assert out.live == {"e1": "e2"}


def test_rewrite_replaces_lone_surrogates() -> None:
    out = rewrite('- button "a\ud800b" [ref=e1]: c\udfff', RefBook().label, max_refs=10)
    assert out.text == '- button "a\ufffdb" [ref=e1]: c\ufffd'


def test_page_of_ends_pages_at_line_ends_unless_a_line_is_longer() -> None:
    text = "aaaa\nbbbb\ncc"
    assert page_of(text, 0, 7) == ("aaaa\n", 5)
    assert page_of(text, 5, 7) == ("bbbb\ncc", None)
    assert page_of(text, 0, 3) == ("aaa", 3)
    assert page_of(text, 0, 12) == (text, None)
    assert page_of(text, 12, 5) == ("", None)


def test_ref_book_keeps_labels_per_document_and_never_reuses_one() -> None:
    book = RefBook()
    assert (book.label("e1"), book.label("e2"), book.label("e1")) == ("e1", "e2", "e1")
    book.publish({"e1": "e1"})
    assert book.resolve("e1") == "e1"
    with pytest.raises(RefStale):
        book.resolve("e2")  # issued, but not by the latest snapshot
    book.new_document()
    with pytest.raises(RefStale):
        book.resolve("e1")
    assert book.label("e1") == "e3"
