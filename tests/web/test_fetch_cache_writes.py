"""What fetch writes to the response cache (issue 26): one snapshot per download, nothing on a
cache hit, and with NO_CACHE only the fileKey's snapshot its reply hands out."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager

from csp_web.config import Config
from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import Reply
from specialists.web.pages.ops_fetch import OPS
from specialists.web.services import WebServices
from tests.net._origin import Origin
from tests.web.conftest import DispatcherFactory
from tests.web.pages_support import ARTICLE, fetch, hits, run, serve


@contextmanager
def cache_db(config: Config) -> Iterator[sqlite3.Connection]:
    """A second connection to the cache's SQLite file: its ``data_version`` moves with every
    commit another connection makes, so it sees any write the daemon's cache makes."""
    with closing(sqlite3.connect(os.path.join(config.cache_dir, "cache.db"))) as db:
        yield db


def writes_seen(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA data_version").fetchone()[0])


async def by_key(dispatcher: Dispatcher, reply: Reply) -> str | None:
    """The DATA of a fetch of ``reply``'s FILE_KEY."""
    key = reply.get("FILE_KEY") or ""
    return (await run(dispatcher, "fetch", "CONTENT", None, ("FILE_KEY", key))).get("DATA")


def rows_by_namespace(db: sqlite3.Connection) -> dict[str, int]:
    rows = db.execute("SELECT tag, count(*) FROM Cache GROUP BY tag").fetchall()
    return {str(tag): int(count) for tag, count in rows}


async def test_a_fetch_answered_from_the_cache_writes_nothing_to_it(
    make_dispatcher: DispatcherFactory, origin: Origin, web_config: Config
) -> None:
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    first = await fetch(dispatcher, url)
    with cache_db(web_config) as db:
        assert rows_by_namespace(db) == {"fetch": 1, "filekey": 1}
        before = writes_seen(db)
        for _ in range(5):
            reply = await fetch(dispatcher, url)
            assert reply.get("CACHED") == "true"
            assert reply.get("FILE_KEY") == first.get("FILE_KEY")
        assert writes_seen(db) == before
    assert hits(origin, "/tides") == 1


async def test_a_fetch_with_no_cache_keeps_only_the_filekey_its_reply_hands_out(
    make_dispatcher: DispatcherFactory, origin: Origin, web_config: Config
) -> None:
    """NO_CACHE neither reads nor writes the fetch cache; the fileKey's snapshot is written,
    as the reply's FILE_KEY must page (START) what this download read."""
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    reply = await fetch(dispatcher, url, ("NO_CACHE", "true"))
    with cache_db(web_config) as db:
        assert rows_by_namespace(db) == {"filekey": 1}
    assert await by_key(dispatcher, reply) == reply.get("DATA")
    assert (await fetch(dispatcher, url)).get("CACHED") == "false"
    assert hits(origin, "/tides") == 2


async def test_a_page_fetched_again_after_an_invalidation_keeps_its_filekey_again(
    make_dispatcher: DispatcherFactory, origin: Origin, web: WebServices
) -> None:
    """The memory tier stands for the disk only while it holds the entry: once the fileKey
    namespace is emptied, the next fetch writes the snapshot again and its key reads."""
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    reply = await fetch(dispatcher, url)
    await web.cache.invalidate("filekey")
    assert (await fetch(dispatcher, url)).get("CACHED") == "true"
    assert await by_key(dispatcher, reply) == reply.get("DATA")
