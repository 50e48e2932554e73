"""Control characters never reach a reply from a page's text (an agent may print TITLE or DATA
to a terminal: ESC starts its escape sequences). C0 controls but tab and newline, DEL and the
C1 controls are dropped from every view and field of a page, whether the page held them raw or
as character references; a terminal sequence goes whole."""

from __future__ import annotations

import pytest

from csp_web.net.result import readable
from protocol import Status
from specialists.web.pages.ops_fetch import OPS
from tests.net._origin import Origin
from tests.web.conftest import DispatcherFactory
from tests.web.pages_support import fetch, run, serve

PROSE = "The harbour fills twice a day, and the boats wait for the evening tide to leave."


def _page(esc: str, dele: str, nul: str) -> bytes:
    return (
        f"<html><head><title>Tides{esc}[31m{dele}</title>"
        f'<meta name="description" content="Tide{esc}]0;owned{esc}\\ tables{dele}">'
        f'<meta name="author" content="Ann{nul}{esc}[2J Lee"></head>'
        f"<body><article><h1>Tides{esc}[31m</h1><p>{PROSE}{esc}[0m{dele}</p>"
        f"<p>{PROSE}</p></article></body></html>"
    ).encode()


@pytest.mark.parametrize(
    ("esc", "dele", "nul"),
    [("\x1b", "\x7f\u0085", "\x00\x01"), ("&#27;", "&#127;", "&#1;")],
    ids=["raw", "references"],
)
async def test_title_metadata_and_content_of_a_page_carry_no_control_character(
    make_dispatcher: DispatcherFactory, origin: Origin, esc: str, dele: str, nul: str
) -> None:
    url = serve(origin, "/tides", _page(esc, dele, nul))
    reply = await fetch(make_dispatcher(OPS), url)
    assert (reply.status, reply.get("TITLE"), reply.get("AUTHOR")) == (
        Status.OK,
        "Tides",
        "Ann Lee",
    )
    assert reply.get("DESCRIPTION") == "Tide tables"
    assert reply.get("DATA") == f"# Tides\n\n{PROSE}\n\n{PROSE}"
    meta = await run(make_dispatcher(OPS), "meta", "META", url)
    assert meta.get("TITLE") == "Tides"


async def test_plain_text_keeps_its_tabs_and_lines_and_loses_its_controls(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """ESC, DEL and C1 are no binary bytes to WHATWG: the text is read, without them (a BEL
    or NUL would make it binary: csp_web/net/sniff.py)."""
    body = b"name\tvalue\r\nalpha\t\x1b[1m1\x1b[0m\r\nbeta\t2\x7f\xc2\x9b0m\n"
    url = serve(origin, "/table.txt", body, "text/plain; charset=utf-8")
    reply = await fetch(make_dispatcher(OPS), url)
    assert reply.get("DATA") == "name\tvalue\nalpha\t1\nbeta\t2\n"


async def test_a_csv_document_loses_its_controls_too(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/t.csv", b"name,value\nal\x1b[31mpha,1\x7f\n", "text/csv")
    reply = await fetch(make_dispatcher(OPS), url)
    assert reply.get("DATA") == "| name | value |\n| --- | --- |\n| alpha | 1 |"


def test_readable_keeps_text_whole_and_drops_only_controls() -> None:
    text = "Ünïcödé — “quotes”\ttab\nline 東京"
    assert readable(text) is text
    assert readable("a\x0bb\x0cc") == "a b c"  # vertical tab, form feed: spaces
    assert readable("a\rb\r\nc") == "a\nb\nc"
    assert readable("a\x1b]8;;https://x.test\x07link\x1b]8;;\x07b") == "alinkb"
    assert readable("line\x00with\x1bcontrol") == "linewithcontrol"  # a lone ESC goes alone
