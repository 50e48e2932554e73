"""REQ:verify (issue 29): quotes checked against a fileKey's stored text (held, else in the
File Cabinet) or against the page at a URL, fetched as fetch does. Pages come from a real
local HTTPS origin; memory is the embedded reference sink."""

from __future__ import annotations

import hashlib

from csp_web.core.api.context import Peer
from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import Reply, Status, serialize
from specialists.web.pages.filekeys import NAMESPACE as SNAPSHOTS
from specialists.web.pages.loading import CACHE_NAMESPACE
from specialists.web.services import WebServices
from specialists.web.verify.ops_verify import MAX_QUOTES, QUOTE_MAX_CHARS
from tests.net._origin import Origin
from tests.web.pages_support import ARTICLE, MARKDOWN, PARAGRAPHS, TITLE, serve
from tests.web.test_documents import ask, docs, workspace

__all__ = ["docs", "workspace"]  # the fixtures, used by name

FIRST = "The North Sea has two high tides every day"
OTHER_UID = Peer("someone-else", 2000, 9)


async def verify(
    dispatcher: Dispatcher, *fields: tuple[str, str], peer: Peer | None = None
) -> Reply:
    extra = {} if peer is None else {"peer": peer}
    return await ask(dispatcher, "verify", "VERIFY", *fields, **extra)


async def fetched_key(dispatcher: Dispatcher, url: str) -> str:
    key = (await ask(dispatcher, "fetch", "CONTENT", ("URL", url))).get("FILE_KEY")
    assert key is not None
    return key


def place(text: str, start: int) -> str:
    """``@start-end sha256:<hex>`` of ``MARKDOWN[start:start + len(text)]``."""
    end = start + len(text)
    return f"@{start}-{end} sha256:{hashlib.sha256(MARKDOWN[start:end].encode()).hexdigest()}"


async def test_each_quote_is_found_moved_or_not_found_in_the_snapshot(
    docs: Dispatcher, origin: Origin
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    key = await fetched_key(docs, url)
    at = MARKDOWN.index(FIRST)
    reply = await verify(
        docs,
        ("FILE_KEY", key),
        ("QUOTE", f"@{at}-{at + len(FIRST)} {FIRST}"),
        ("QUOTE", f"@0-10 {FIRST}"),
        ("QUOTE", "The  North\nSea has \u201ctwo\u201d"),
        ("QUOTE", "The moon is made of cheese"),
    )
    assert reply.status is Status.OK
    assert reply.fields == (
        ("SCOPE", "[origin.test]"),
        ("DATA", "quotes:4"),
        ("FILE_KEY", key),
        ("QUOTE", f"1 found {place(FIRST, at)}"),
        ("QUOTE", f"2 moved {place(FIRST, at)} {key}"),
        ("QUOTE", "3 not_found"),
        ("QUOTE", "4 not_found"),
        ("FOUND", "1"),
        ("MOVED", "1"),
        ("NOT_FOUND", "2"),
        ("CITE", f'{url} "{TITLE}"'),
    )


async def test_retyped_quotes_are_found_at_the_offsets_of_the_stored_text(
    docs: Dispatcher, origin: Origin
) -> None:
    key = await fetched_key(docs, serve(origin, "/tides", ARTICLE))
    retyped = "The  North\nSea has two high\u00a0tides"
    reply = await verify(docs, ("FILE_KEY", key), ("QUOTE", retyped))
    at = MARKDOWN.index(FIRST)
    assert reply.get_all("QUOTE") == [f"1 found {place('The North Sea has two high tides', at)}"]


async def test_a_url_alone_is_fetched_and_its_snapshot_held_for_later_checks(
    docs: Dispatcher, origin: Origin
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    reply = await verify(docs, ("URL", url), ("QUOTE", FIRST))
    key = reply.get("FILE_KEY")
    assert key is not None
    assert reply.get("FOUND") == "1"
    again = await verify(docs, ("FILE_KEY", key), ("QUOTE", FIRST))
    assert again.get_all("QUOTE") == reply.get_all("QUOTE")


async def test_a_quote_only_in_the_newer_page_is_moved_with_the_newer_filekey(
    docs: Dispatcher, origin: Origin, web: WebServices
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    old = await fetched_key(docs, url)
    added = "Tide gauges now report the water level every minute."
    serve(origin, "/tides", ARTICLE.replace("</article>", f"<p>{added}</p></article>"))
    await web.cache.invalidate(CACHE_NAMESPACE)  # the fetch cache's day has passed
    reply = await verify(docs, ("FILE_KEY", old), ("URL", url), ("QUOTE", FIRST), ("QUOTE", added))
    new = reply.get_all("QUOTE")[1].split()[-1]
    assert new != old
    assert new.startswith("fk_")
    assert reply.get("FILE_KEY") == old
    assert reply.get_all("QUOTE")[0].startswith("1 found @")
    assert reply.get_all("QUOTE")[1].startswith("2 moved @")
    assert (reply.get("FOUND"), reply.get("MOVED"), reply.get("NOT_FOUND")) == ("1", "1", "0")


async def test_a_key_no_longer_held_is_unknown_unless_the_cabinet_keeps_it(
    docs: Dispatcher, origin: Origin, web: WebServices
) -> None:
    key = await fetched_key(docs, serve(origin, "/tides", ARTICLE))
    await web.cache.invalidate(SNAPSHOTS)  # the snapshot's day has passed
    gone = await verify(docs, ("FILE_KEY", key), ("QUOTE", FIRST))
    assert (gone.status, gone.get("ERROR")) == (
        Status.FAIL,
        f"unknown_file_key:{key} not in the cabinet",
    )
    key = await fetched_key(docs, serve(origin, "/tides", ARTICLE))
    assert (await ask(docs, "save", "ACK", ("FILE_KEY", key))).status is Status.OK
    await web.cache.invalidate(SNAPSHOTS)
    kept = await verify(docs, ("FILE_KEY", key), ("QUOTE", FIRST))
    at = MARKDOWN.index(FIRST)
    assert (kept.status, kept.get_all("QUOTE")) == (Status.OK, [f"1 found {place(FIRST, at)}"])
    assert kept.get("SCOPE") == "[origin.test]"


async def test_a_filekey_fetched_by_another_uid_verifies_alike(
    docs: Dispatcher, origin: Origin
) -> None:
    """fileKeys name content by its hash and are not per uid (as fetch FILE_KEY reads them)."""
    key = await fetched_key(docs, serve(origin, "/tides", ARTICLE))
    mine = await verify(docs, ("FILE_KEY", key), ("QUOTE", FIRST))
    theirs = await verify(docs, ("FILE_KEY", key), ("QUOTE", FIRST), peer=OTHER_UID)
    assert theirs.fields == mine.fields


async def test_quotes_are_taken_up_to_the_cap_and_one_more_is_refused(
    docs: Dispatcher, origin: Origin
) -> None:
    key = await fetched_key(docs, serve(origin, "/tides", ARTICLE))
    quotes = [("QUOTE", PARAGRAPHS[n % len(PARAGRAPHS)][:30]) for n in range(MAX_QUOTES)]
    full = await verify(docs, ("FILE_KEY", key), *quotes)
    assert (full.get("DATA"), full.get("FOUND")) == (f"quotes:{MAX_QUOTES}", str(MAX_QUOTES))
    over = await verify(docs, ("FILE_KEY", key), *quotes, ("QUOTE", FIRST))
    assert over.get("ERROR") == f"invalid_field:over {MAX_QUOTES} QUOTE fields"


async def test_a_quote_is_taken_up_to_its_cap_in_chars_and_refused_past_it(
    docs: Dispatcher, origin: Origin
) -> None:
    key = await fetched_key(docs, serve(origin, "/tides", ARTICLE))
    longest = FIRST + " " + "x" * (QUOTE_MAX_CHARS - len(FIRST) - 1)
    assert (await verify(docs, ("FILE_KEY", key), ("QUOTE", longest))).get("NOT_FOUND") == "1"
    huge = await verify(docs, ("FILE_KEY", key), ("QUOTE", longest + "x"))
    assert huge.get("ERROR") == f"invalid_field:QUOTE over {QUOTE_MAX_CHARS} chars"
    ten_mb = await verify(docs, ("FILE_KEY", key), ("QUOTE", "y" * 10_000_000))
    assert ten_mb.get("ERROR") == f"invalid_field:QUOTE over {QUOTE_MAX_CHARS} chars"


async def test_a_hostile_quote_with_controls_and_newlines_is_not_found_and_never_echoed(
    docs: Dispatcher, origin: Origin
) -> None:
    key = await fetched_key(docs, serve(origin, "/tides", ARTICLE))
    hostile = "The North\x00Sea\r\nSTATUS OK\n\x1b]52;c;ZXZpbA==\x07\x85"
    reply = await verify(docs, ("FILE_KEY", key), ("QUOTE", hostile))
    assert reply.get_all("QUOTE") == ["1 not_found"]
    wire = serialize(reply)
    assert b"\x00" not in wire
    assert b"\x1b" not in wire
    assert b"STATUS OK\n" not in wire[10:]


async def test_bad_requests_are_refused_with_the_field_named(
    docs: Dispatcher, origin: Origin
) -> None:
    key = await fetched_key(docs, serve(origin, "/tides", ARTICLE))
    cases = [
        ((("FILE_KEY", key),), "missing_field:QUOTE"),
        ((("QUOTE", FIRST),), "missing_field:FILE_KEY or URL"),
        ((("FILE_KEY", key), ("QUOTE", " ** ")), "invalid_field:QUOTE 1 holds no words"),
        (
            (("FILE_KEY", key), ("QUOTE", f"@9-9 {FIRST}")),
            "invalid_field:QUOTE 1: @start-end is empty",
        ),
        (
            (("FILE_KEY", "fk_nope"), ("QUOTE", FIRST)),
            "invalid_field:FILE_KEY must be fk_ and 16 of [a-z2-7]",
        ),
    ]
    for fields, error in cases:
        reply = await verify(docs, *fields)
        assert (reply.status, reply.get("ERROR")) == (Status.FAIL, error)
