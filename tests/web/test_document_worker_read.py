"""The worker's read step (``document_worker.read``) in this process: the answer and exit
status it gives for a readable file, an unreadable one and one nested past the recursion
limit. The worker itself runs as a subprocess (its bounds would bind the test process), so
coverage sees this step only here; test_document_worker_hostile.py attacks the process."""

from __future__ import annotations

from specialists.web.pages import document_worker

CSV = {"reader": "sheet:read_csv", "limits": {}}


def test_a_readable_file_is_exit_0_and_its_document_as_a_mapping() -> None:
    status, answer = document_worker.read(CSV, b"a,b\n1,2\n")
    assert (status, answer["markdown"], answer["cut"]) == (
        0,
        "| a | b |\n| --- | --- |\n| 1 | 2 |",
        False,
    )


def test_an_unreadable_file_is_the_reported_exit_with_its_code_and_detail() -> None:
    header = {"reader": "pdf:read_pdf", "limits": {}}
    assert document_worker.read(header, b"not a pdf") == (
        document_worker.REPORTED_EXIT,
        {"code": "corrupt_document", "detail": "pdf:damaged"},
    )


def test_a_limit_in_the_header_reaches_the_reader() -> None:
    header = {"reader": "sheet:read_csv", "limits": {"max_rows": 1}}
    status, answer = document_worker.read(header, b"a\n1\n2\n3\n")
    assert (status, answer["cut"]) == (0, True)


def test_a_file_nested_past_the_recursion_limit_is_corrupt_too_deep() -> None:
    depth = 100_000
    summary = '<div xmlns="http://www.w3.org/1999/xhtml">' + "<b>" * depth + "x" + "</b>" * depth
    data = (
        '<feed xmlns="http://www.w3.org/2005/Atom"><title>T</title><entry><title>E</title>'
        f'<summary type="xhtml">{summary}</div></summary></entry></feed>'
    ).encode()
    header = {"reader": "feed:read_feed", "limits": {}}
    assert document_worker.read(header, data) == (
        document_worker.REPORTED_EXIT,
        {"code": "corrupt_document", "detail": "feed:too_deep"},
    )
