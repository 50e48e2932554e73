"""Turning a body into text: BOM, then the header's charset, then <meta charset>, then UTF-8."""

from __future__ import annotations

import httpx
import pytest

from csp_web.net import FetchResult, decode_text
from csp_web.net.result import parse_content_type


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("text/html; charset=UTF-8", ("text/html", "utf-8")),
        ('Text/HTML; Charset="ISO-8859-1"', ("text/html", "iso-8859-1")),
        ("application/json", ("application/json", None)),
        ("", ("", None)),
    ],
)
def test_content_type_gives_a_lower_case_media_type_and_charset(
    value: str, parsed: tuple[str, str | None]
) -> None:
    assert parse_content_type(value) == parsed


def test_the_header_charset_decodes_the_body() -> None:
    assert decode_text("caf\u00e9".encode("latin-1"), charset="iso-8859-1") == "caf\u00e9"


def test_a_meta_charset_in_the_first_1024_bytes_decodes_html_without_a_header_charset() -> None:
    body = b'<html><head><meta charset="windows-1252"></head>caf\xe9'
    assert decode_text(body, charset=None).endswith("caf\u00e9")


def test_a_meta_http_equiv_content_type_counts_as_meta_charset() -> None:
    body = b'<meta http-equiv="Content-Type" content="text/html; charset=koi8-r">\xc1'
    assert decode_text(body, charset=None).endswith("\u0430")


def test_a_meta_charset_past_the_first_1024_bytes_is_ignored() -> None:
    """koi8-r would read 0xC1 as "а"; unread, one non-ASCII byte is too little to detect
    from, so the page is windows-1252 as a browser's default."""
    body = b" " * 1024 + b'<meta charset="koi8-r">\xc1'
    assert decode_text(body, charset=None).endswith("\u00c1")


def test_a_meta_charset_does_not_apply_to_non_html() -> None:
    body = b'{"x": "<meta charset=latin-1>\xe9"}'
    assert "\ufffd" in decode_text(body, charset=None, content_type="application/json")


def test_the_header_charset_wins_over_meta() -> None:
    body = '<meta charset="latin-1">\u00e9'.encode()
    assert decode_text(body, charset="utf-8").endswith("\u00e9")


def test_a_bom_wins_over_the_header_charset() -> None:
    assert decode_text("\ufeffhi".encode("utf-16-le"), charset="latin-1") == "hi"


@pytest.mark.parametrize("charset", ["no-such-charset", "base64", "rot13"])
def test_an_unknown_or_non_text_charset_is_skipped_as_undeclared(charset: str) -> None:
    assert decode_text(b"ok \xff", charset=charset) == "ok \u00ff"


def test_fetch_result_text_uses_its_own_charset_and_type() -> None:
    result = FetchResult(
        url="https://example.com/",
        status_code=200,
        headers=httpx.Headers(),
        body="\u00e9".encode("latin-1"),
        content_type="text/plain",
        charset="latin-1",
        redirect_chain=("https://example.com/",),
        elapsed_s=0.0,
    )
    assert result.text() == "\u00e9"
