"""fetch's hot route (issue 26 goal 1): a page the cache's memory tier holds is answered in the
connection's reader (``Dispatcher.try_now``) with the very reply, audit record and cache
state that its task would leave; whatever its task would do otherwise is left to the task."""

from __future__ import annotations

import json
import os

import pytest
import trio

from csp_web.config import Config
from csp_web.core.api.context import Peer
from csp_web.core.dispatch import hot
from csp_web.core.dispatch.admission import Slots
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.core.wire.connection import Shutdown
from protocol import Field, Reply, Task
from specialists.web.pages.ops_fetch import OPS
from specialists.web.services import WebServices
from tests.harness import Harness, outbox_of
from tests.net._origin import Origin
from tests.web.conftest import DispatcherFactory
from tests.web.pages_support import ARTICLE, WAIT_S, fetch, hits, serve, web_audits
from tests.web.test_fetch_cache_writes import cache_db, rows_by_namespace, writes_seen

PEER = Peer("t")


def fetch_task(url: str, *fields: Field) -> Task:
    return Task("fetch", "WEB", "CONTENT", url, (("ID", "7"), *fields))


async def now(dispatcher: Dispatcher, task: Task) -> Reply | None:
    with trio.fail_after(WAIT_S):
        return await dispatcher.try_now(task, PEER)


async def slow(dispatcher: Dispatcher, task: Task) -> Reply:
    with trio.fail_after(WAIT_S):
        return await dispatcher.run(task, PEER)


@pytest.mark.parametrize(
    "fields",
    [
        (),
        (("MAX_CHARS", "100"),),  # PARTIAL, with the SUMMARY its task kept
        (("MAX_CHARS", "100"), ("START", "100"), ("EXTRACT", "html")),
        (("BOARD", "true"), ("MAX_AGE", "3600"), ("RENDER", "auto")),
        (("MAX_CHARS", "50000"), ("MAX_PAGES", "1000")),  # at fetch's caps (N)
    ],
)
async def test_a_hot_hit_replies_the_whole_frame_its_task_replies(
    make_dispatcher: DispatcherFactory, origin: Origin, fields: tuple[Field, ...]
) -> None:
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    task = fetch_task(url, *fields)
    await slow(dispatcher, task)  # downloaded: the page, its fileKey and summary are kept
    from_task = await slow(dispatcher, task)
    answered = await now(dispatcher, task)
    assert answered == from_task
    assert answered.get("CACHED") == "true"
    assert hits(origin, "/tides") == 1


async def test_a_hot_hit_leaves_the_audit_record_its_task_leaves(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    await fetch(dispatcher, url)
    await slow(dispatcher, fetch_task(url))
    assert await now(dispatcher, fetch_task(url)) is not None
    from_task, answered = web_audits(dispatcher)[-2:]
    varying = ("time", "duration_ms")
    assert {k: v for k, v in answered.items() if k not in varying} == {
        k: v for k, v in from_task.items() if k not in varying
    }
    assert answered["cache_hit"] is True
    assert answered["target"] == url


async def test_a_thousand_hot_hits_write_nothing_to_the_cache(
    make_dispatcher: DispatcherFactory, origin: Origin, web_config: Config
) -> None:
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    await fetch(dispatcher, url, ("MAX_CHARS", "100"))
    path = os.path.join(web_config.cache_dir, "cache.db")
    with cache_db(web_config) as db:
        rows, version, size = rows_by_namespace(db), writes_seen(db), os.path.getsize(path)
        for _ in range(1000):
            reply = await now(dispatcher, fetch_task(url, ("MAX_CHARS", "100")))
            assert reply is not None
            assert reply.get("CACHED") == "true"
        assert (rows_by_namespace(db), writes_seen(db)) == (rows, version)
        assert os.path.getsize(path) == size


@pytest.mark.parametrize(
    "fields",
    [
        (("NO_CACHE", "true"),),
        (("MAX_AGE", "0"),),
        (("RENDER", "always"),),
        (("MAX_CHARS", "50001"),),  # past fetch.max_chars_cap (N+1): its task refuses it
        (("MAX_PAGES", "1001"),),  # past fetch.max_pages_cap (N+1): its task refuses it
        (("EXTRACT", "json"),),  # a view the page lacks: its task refuses it
        (("START", "999999"),),  # past the end: its task refuses it
        (("BUDGET", "fetches=1"),),  # charged by its task
        (("TIMEOUT_MS", "nonsense"),),
        (("URL", "https://origin.test/other"),),  # a second URL
    ],
)
async def test_a_hit_its_task_would_answer_otherwise_is_left_to_its_task(
    make_dispatcher: DispatcherFactory, origin: Origin, fields: tuple[Field, ...]
) -> None:
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    await fetch(dispatcher, url)
    assert await now(dispatcher, fetch_task(url, *fields)) is None
    assert await now(dispatcher, fetch_task(url)) is not None


async def test_a_page_never_fetched_is_left_to_its_task(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    assert await now(dispatcher, fetch_task(url)) is None
    assert hits(origin, "/tides") == 0


async def test_no_hot_hit_crosses_an_invalidation(
    make_dispatcher: DispatcherFactory, origin: Origin, web: WebServices
) -> None:
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    await fetch(dispatcher, url)
    await web.cache.invalidate("fetch")
    assert await now(dispatcher, fetch_task(url)) is None
    assert (await slow(dispatcher, fetch_task(url))).get("CACHED") == "false"


async def test_a_hit_whose_filekey_would_be_kept_again_is_left_to_its_task(
    make_dispatcher: DispatcherFactory, origin: Origin, web: WebServices
) -> None:
    """The task writes the fileKey's snapshot again when the memory tier lost it: that is a
    write, so not the hot route's to answer."""
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    await fetch(dispatcher, url)
    await web.cache.invalidate("filekey")
    assert await now(dispatcher, fetch_task(url)) is None
    await slow(dispatcher, fetch_task(url))  # kept again
    assert await now(dispatcher, fetch_task(url)) is not None


async def test_a_hot_hit_is_not_answered_while_the_daemon_stops(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    await fetch(dispatcher, url)
    dispatcher.shutting_down = True
    assert await now(dispatcher, fetch_task(url)) is None


def frame(url: str, frame_id: str) -> bytes:
    return f"TASK REQ:fetch {url} IN:WEB OUT:CONTENT\nID {frame_id}\n\n".encode()


@pytest.mark.slow
async def test_a_thousand_pipelined_hits_on_a_connection_answer_as_their_tasks_do(
    make_dispatcher: DispatcherFactory, origin: Origin, nursery: trio.Nursery
) -> None:
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    peer = Harness(dispatcher, nursery, Shutdown()).connect()
    with trio.fail_after(60):
        await peer.send(frame(url, "miss"))
        assert (await peer.reply()) is not None
        from_task = await slow(dispatcher, fetch_task(url))
        await peer.send(b"".join(frame(url, f"h{n}") for n in range(1000)))
        replies = await peer.replies(1000)
    expected = [
        Reply(from_task.status, (("ID", f"h{n}"), *from_task.fields[1:])) for n in range(1000)
    ]
    assert sorted(replies, key=lambda r: int((r.id or "h-1")[1:])) == expected  # any order (C-2)
    assert dispatcher.stats.frames >= 1001
    assert hits(origin, "/tides") == 1
    rows = outbox_of(dispatcher)._store.oldest(2000)  # the durable store is what to observe
    records = [json.loads(write.data) for _, write in rows if write.type == "audit"]
    answered = [record for record in records if str(record.get("id", "")).startswith("h")]
    assert len(answered) == 1000  # one record per frame
    assert all(record["cache_hit"] is True for record in answered)


async def test_a_hot_hit_is_answered_while_the_web_pool_is_full_and_a_miss_is_busy(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """A hit holds no slot (it never waits, nothing runs on): a full pool (C-3) refuses
    what would run, not what is answered at once."""
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    other = serve(origin, "/other", ARTICLE)
    await fetch(dispatcher, url)
    dispatcher.pools["web"] = pool = Slots("web", max_running=1, max_queued=0)
    assert pool.take_now()
    answered = await now(dispatcher, fetch_task(url))
    assert answered is not None
    assert answered.get("CACHED") == "true"
    refused = await now(dispatcher, fetch_task(other))
    assert refused is not None
    assert refused.get("ERROR") == "busy:web: 1 running, 0 queued"
    assert hits(origin, "/other") == 0


async def test_only_a_held_page_under_no_budget_is_guessed_hot_before_its_turn(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """The connection's guess (``hot.likely``): a wrong one costs the frame a second turn."""
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    assert not hot.likely(dispatcher, fetch_task(url), PEER)
    await fetch(dispatcher, url)
    assert hot.likely(dispatcher, fetch_task(url), PEER)
    assert not hot.likely(dispatcher, fetch_task(url, ("BUDGET", "fetches=1")), PEER)
    assert not hot.likely(dispatcher, fetch_task("https://origin.test/else"), PEER)
    assert not hot.likely(dispatcher, fetch_task("http://[::1"), PEER)


async def test_a_client_hanging_up_amid_pipelined_hits_leaves_the_daemon_answering(
    make_dispatcher: DispatcherFactory, origin: Origin, nursery: trio.Nursery
) -> None:
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    await fetch(dispatcher, url)
    harness = Harness(dispatcher, nursery, Shutdown())
    gone = harness.connect()
    with trio.fail_after(WAIT_S):
        await gone.send(b"".join(frame(url, f"h{n}") for n in range(200)))
        await gone.replies(3)
        await gone.stream.aclose()  # 197 replies have nobody to read them
        peer = harness.connect()
        await peer.send(frame(url, "after"))
        reply = await peer.reply()
    assert reply is not None
    assert (reply.id, reply.get("CACHED")) == ("after", "true")
