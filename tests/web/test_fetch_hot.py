"""fetch's hot route (issue 26 goal 1): a page the cache's memory tier holds is answered in the
connection's reader (``Dispatcher.try_now``) with the very reply, audit record and cache
state that its task would leave; whatever its task would do otherwise is left to the task."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections import Counter
from collections.abc import Callable

import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config
from csp_web.core.api.context import OpContext, Peer
from csp_web.core.api.fields import FieldSpec, Params
from csp_web.core.api.ops import Hot, NowHandler, Op
from csp_web.core.api.replies import Result
from csp_web.core.api.trace import TraceContext
from csp_web.core.dispatch import hot
from csp_web.core.dispatch.admission import Slots
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.core.wire import connection
from csp_web.core.wire.connection import Shutdown
from csp_web.core.wire.turns import FairStarts
from csp_web.infra.otel import SCOPE, OtelTracer
from csp_web.memory.outbox import open_outbox
from protocol import Field, Reply, Status, Task
from specialists.web.config import web_section
from specialists.web.pages.fetch_now import answer_hit, likely_hit
from specialists.web.pages.ops_fetch import OPS
from specialists.web.services import WebServices
from tests.harness import Harness, build_dispatcher, outbox_of
from tests.net._origin import Origin
from tests.web.conftest import DispatcherFactory
from tests.web.pages_support import ARTICLE, MARKDOWN, WAIT_S, fetch, hits, serve, web_audits
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


@pytest.mark.parametrize("extra", [-1, 0, 1])
async def test_start_on_a_hit_answers_as_its_task_at_the_last_character_the_end_and_past_it(
    make_dispatcher: DispatcherFactory, origin: Origin, extra: int
) -> None:
    """START N-1 is answered hot with its task's reply; N and N+1 are left to the task,
    which refuses them (START N was an empty OK on both routes, review)."""
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    await fetch(dispatcher, url)
    task = fetch_task(url, ("START", str(len(MARKDOWN) + extra)))
    answered = await now(dispatcher, task)
    from_task = await slow(dispatcher, task)
    if extra < 0:
        assert answered == from_task
        assert (from_task.status, from_task.get("DATA")) == (Status.OK, MARKDOWN[-1])
    else:
        assert answered is None
        assert from_task == Reply(
            Status.FAIL,
            (
                ("ID", "7"),
                ("SCOPE", "[]"),
                ("DATA", "none"),
                ("ERROR", f"invalid_field:START beyond the end ({len(MARKDOWN)})"),
            ),
        )


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
    """C-7: a hit holds no slot (it never waits, nothing runs on): a full pool (C-3) refuses
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
        peer = harness.connect(peer=Peer("after"))
        await peer.send(frame(url, "after"))
        reply = await peer.reply()
    assert reply is not None
    assert (reply.id, reply.get("CACHED")) == ("after", "true")


async def test_a_hot_frame_cancelled_while_it_waits_for_its_turn_answers_cancelled(
    make_dispatcher: DispatcherFactory,
    origin: Origin,
    nursery: trio.Nursery,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """C-6, C-7: a REQ:cancel from another connection of the uid reaches a hit held in its
    turn's wait (other connections starting first): it counts it, and the frame answers
    ``cancelled``, as a task would."""
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    await fetch(dispatcher, url)
    parked, gate = trio.Event(), trio.Event()
    turn = connection._Session.wait_turn

    async def contended_turn(session: connection._Session, *, instant: bool = False) -> None:
        if not parked.is_set():  # the hit's turn: a round in which others start first
            parked.set()
            await gate.wait()
        await turn(session, instant=instant)

    monkeypatch.setattr(connection._Session, "wait_turn", contended_turn)
    # Contended: no frame starts without waiting its turn (FairStarts.start_now says no).
    monkeypatch.setattr(FairStarts, "start_now", lambda *_args, **_kwargs: False)
    harness = Harness(dispatcher, nursery, Shutdown())
    held, canceller = harness.connect(), harness.connect()
    with trio.fail_after(WAIT_S):
        await held.send(frame(url, "7"))
        await parked.wait()
        await canceller.send(b"TASK REQ:cancel IN:SYS OUT:ACK\nTARGET 7\n\n")
        cancel = await canceller.reply()
        gate.set()
        answered = await held.reply()
    assert cancel == Reply(
        Status.OK, (("SCOPE", "[sys]"), ("DATA", "cancelled"), ("CANCELLED", "1"))
    )
    cancelled = (("ID", "7"), ("SCOPE", "[]"), ("DATA", "none"))
    assert answered == Reply(Status.FAIL, (*cancelled, ("ERROR", "cancelled:by REQ:cancel")))


async def test_hits_read_after_their_client_hung_up_are_audited_cancelled_as_tasks_are(
    make_dispatcher: DispatcherFactory, origin: Origin, nursery: trio.Nursery
) -> None:
    """C-6: once a reply finds the peer gone, the frames read after are cancelled, not
    answered from the cache to nobody; each frame is audited once, either way."""
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    await fetch(dispatcher, url)
    gone = Harness(dispatcher, nursery, Shutdown()).connect()
    with trio.fail_after(WAIT_S):
        await gone.send(b"".join(frame(url, f"h{n}") for n in range(200)))
        await gone.stream.aclose()  # before any reply: the first one written finds it gone
        while len(_audits_of(dispatcher, "h")) < 200:  # the last records' commits
            await trio.sleep(0.01)
    outcomes = Counter((r["outcome"], r.get("error")) for r in _audits_of(dispatcher, "h"))
    assert set(outcomes) <= {("OK", None), ("FAIL", "cancelled:the client hung up")}
    assert outcomes[("FAIL", "cancelled:the client hung up")] > 0


def _audits_of(dispatcher: Dispatcher, prefix: str) -> list[dict[str, object]]:
    rows = outbox_of(dispatcher)._store.oldest(5000)
    records = [json.loads(write.data) for _, write in rows if write.type == "audit"]
    return [record for record in records if str(record.get("id", "")).startswith(prefix)]


@pytest.fixture
def full_sync(web_config: Config) -> Config:
    return dataclasses.replace(
        web_config, outbox=dataclasses.replace(web_config.outbox, synchronous="full")
    )


async def test_under_full_sync_a_hit_is_left_to_its_task_not_held_for_its_fsync(
    origin: Origin, full_sync: Config, web: WebServices
) -> None:
    """C-7: with ``outbox.synchronous: full`` a record's commit is an fsync in a thread: the
    reader would wait one per hit, where tasks share a group commit. The task answers it."""
    async with open_outbox(full_sync.outbox_path, full_sync.outbox, full_sync.memory) as box:
        dispatcher = build_dispatcher(full_sync, outbox_path(full_sync, box), OPS, web)
        url = serve(origin, "/tides", ARTICLE)
        await fetch(dispatcher, url)
        assert not hot.likely(dispatcher, fetch_task(url), PEER)
        assert await now(dispatcher, fetch_task(url)) is None
        assert (await slow(dispatcher, fetch_task(url))).get("CACHED") == "true"


def _with_route(
    likely: Callable[[Task, WebServices], bool], answer: NowHandler[WebServices]
) -> list[Op[WebServices]]:
    """OPS with fetch's hot route made of ``likely`` and ``answer``."""
    return [dataclasses.replace(op, hot=Hot(likely, answer)) if op.hot else op for op in OPS]


def _failing_route(guess: bool) -> list[Op[WebServices]]:
    """fetch with a hot route that has a bug: in its guess (``guess``) or in its answer."""

    def likely(task: Task, services: WebServices) -> bool:
        if guess:
            raise KeyError("a bug in the guess")
        return True

    def answer(params: Params, ctx: OpContext, services: WebServices) -> Result | None:
        raise KeyError("a bug in the answer")

    return _with_route(likely, answer)


@pytest.mark.parametrize("guess", [True, False], ids=["in_its_guess", "in_its_answer"])
async def test_a_bug_in_the_hot_route_leaves_the_frame_to_its_task(
    make_dispatcher: DispatcherFactory, origin: Origin, nursery: trio.Nursery, guess: bool
) -> None:
    """A hot route that raises (its guess runs in the reader) neither ends the connection
    nor answers ``internal_error``: the frame is answered by its task, as ever."""
    dispatcher = make_dispatcher(_failing_route(guess))
    url = serve(origin, "/tides", ARTICLE)
    await fetch(dispatcher, url)
    from_task = await fetch(dispatcher, url)  # a hit, answered by the task
    peer = Harness(dispatcher, nursery, Shutdown()).connect()
    with trio.fail_after(WAIT_S):
        for n in range(2):
            await peer.send(frame(url, f"h{n}"))
            reply = await peer.reply()
            assert reply == Reply(from_task.status, (("ID", f"h{n}"), *from_task.fields))


@pytest.mark.parametrize(
    "fields",
    [
        (("NO_CACHE", "true"),),
        (("MAX_AGE", "0"),),
        (("RENDER", "always"),),
        (("FILE_KEY", "fk_ht57pi5xvpe3ih5a"),),
        (("URL", "https://origin.test/other"),),  # a second URL
        (("COLOUR", "red"),),  # a field fetch does not know: its task refuses it
    ],
)
async def test_a_frame_its_hot_route_will_decline_is_not_guessed_hot(
    make_dispatcher: DispatcherFactory, origin: Origin, fields: tuple[Field, ...]
) -> None:
    """The guess checks the cheap declines: a wrong one takes an instant turn (L-10's
    frames_per_round) and then a second turn."""
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    await fetch(dispatcher, url)
    assert hot.likely(dispatcher, fetch_task(url), PEER)
    assert not hot.likely(dispatcher, fetch_task(url, *fields), PEER)


async def test_a_field_the_hot_route_does_not_know_leaves_the_frame_to_its_task(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """Refused by default: a field added to fetch is answered by its task until the hot
    route handles it, never ignored by a hit."""
    added = FieldSpec("LANGUAGE", doc="a field fetch gained after its hot route")
    ops = [dataclasses.replace(op, fields=(*op.fields, added)) if op.hot else op for op in OPS]
    dispatcher = make_dispatcher(ops)
    url = serve(origin, "/tides", ARTICLE)
    await fetch(dispatcher, url)
    assert await now(dispatcher, fetch_task(url)) is not None
    assert await now(dispatcher, fetch_task(url, ("LANGUAGE", "nl"))) is None


async def test_a_hot_answer_runs_inside_its_span_and_a_declined_one_leaves_no_span(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """The span covers the op's answer, whose context is the span's (as a task's op's);
    a declined answer's span is dropped: only its task's span is exported."""
    seen: list[TraceContext | None] = []

    def answer(params: Params, ctx: OpContext, services: WebServices) -> Result | None:
        seen.append(ctx.trace)
        return answer_hit(params, ctx, services) if params.flag("BOARD") else None

    dispatcher = make_dispatcher(_with_route(likely_hit, answer))
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    dispatcher.tracer = OtelTracer(provider.get_tracer(SCOPE), [("fetch", "WEB")])
    url = serve(origin, "/tides", ARTICLE)
    await fetch(dispatcher, url)
    exporter.clear()
    assert await now(dispatcher, fetch_task(url, ("BOARD", "true"))) is not None
    (span,) = exporter.get_finished_spans()
    assert seen[-1] is not None
    assert seen[-1].span_id == f"{span.context.span_id:016x}"
    exporter.clear()
    assert await now(dispatcher, fetch_task(url)) is None  # declined: its task runs it
    await slow(dispatcher, fetch_task(url))
    assert len(exporter.get_finished_spans()) == 1


async def test_a_hot_hit_after_the_page_changed_answers_the_new_snapshot_as_its_task_does(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """What a hit keeps of a cache entry (its page, view, fileKey and fields) goes with the
    entry: the page downloaded again under the same URL is answered anew, never from what
    the earlier snapshot's hits kept."""
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    await fetch(dispatcher, url)
    first = await now(dispatcher, fetch_task(url))
    assert first is not None
    assert "lighthouse" not in (first.get("DATA") or "")
    changed = ARTICLE.replace("</article>", "<p>A lighthouse keeps the watch.</p></article>")
    serve(origin, "/tides", changed)
    assert (await fetch(dispatcher, url, ("MAX_AGE", "0"))).get("CACHED") == "false"  # kept
    answered = await now(dispatcher, fetch_task(url))
    assert answered is not None
    assert "lighthouse" in (answered.get("DATA") or "")
    assert answered.get("FILE_KEY") != first.get("FILE_KEY")
    assert answered == await slow(dispatcher, fetch_task(url))


async def test_no_hot_hit_outlives_its_entry_ttl(
    make_dispatcher: DispatcherFactory,
    origin: Origin,
    web_config: Config,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past ``cache.fetch_ttl_s`` the entry and what its hits kept are gone: the hot route
    declines and the task downloads the page again."""
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    await fetch(dispatcher, url)
    assert await now(dispatcher, fetch_task(url)) is not None  # its memo made
    assert await now(dispatcher, fetch_task(url)) is not None  # and read
    later = time.time() + web_section(web_config).cache.fetch_ttl_s + 1
    monkeypatch.setattr(time, "time", lambda: later)
    assert await now(dispatcher, fetch_task(url)) is None
    assert (await slow(dispatcher, fetch_task(url))).get("CACHED") == "false"
    assert hits(origin, "/tides") == 2


VIEWS = [
    [("EXTRACT", "html")],
    [],
    [("MAX_CHARS", "100")],
    [("MAX_CHARS", "100"), ("START", "100")],
    [("EXTRACT", "html"), ("MAX_CHARS", "80"), ("START", "40")],
    [("MAX_AGE", "3600")],
    [("EXTRACT", "json")],
    [],
]


async def answered_alike(
    dispatcher: Dispatcher, urls: tuple[str, ...], views: list[list[Field]]
) -> int:
    """Ask each of ``views`` of each of ``urls`` hot, then as a task: every hot answer is its
    task's whole frame; how many were answered hot."""
    answered = 0
    for fields in views:
        for url in urls:
            task = fetch_task(url, *fields)
            hot_reply = await now(dispatcher, task)
            if hot_reply is not None:
                answered += 1
                assert hot_reply == await slow(dispatcher, task), (url, fields)
    return answered


async def test_hits_of_one_entry_in_turn_each_answer_their_own_view_and_window(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """What one hit derives and keeps in its entry's memo (a view, its window's fields) never
    answers another's: EXTRACT, START, MAX_CHARS and MAX_AGE in turn, under three spellings
    of one URL, each hot answer is its task's."""
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    await slow(dispatcher, fetch_task(url))
    variants = (url, url + "#frag", url.replace("origin.test", "ORIGIN.test"))
    assert await answered_alike(dispatcher, variants, VIEWS) >= len(variants) * 4  # 12 of 24
