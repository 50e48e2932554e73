"""Dispatch: op lookup, field validation, admission, deadlines, the one error-to-reply place."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import trio
import trio.testing

from csp_web.app.catalog import SPECIALISTS
from csp_web.config import Config, SlotLimits, SlotsConfig, TasksConfig
from csp_web.core.api import fields as fields_module
from csp_web.core.api.context import OpContext, Peer
from csp_web.core.api.errors import FieldError, OpError
from csp_web.core.api.fields import MAX_JSON_DEPTH, FieldSpec, Params, validate
from csp_web.core.api.ops import ECHOED_NAME_CHARS, Op
from csp_web.core.api.replies import Result
from csp_web.core.daemon.compose import op_table
from csp_web.core.dispatch import dispatcher as dispatcher_module
from protocol import ErrorCode, Reply, Status, Task
from tests.harness import TEST_OPS, build_dispatcher, open_harness


def _error(reply: Reply) -> str:
    assert reply.status is Status.FAIL, reply
    return (reply.get("ERROR") or "").partition(":")[0]


async def _one(config: Config, frame: bytes) -> Reply:
    async with open_harness(config) as harness:
        peer = harness.connect()
        await peer.send(frame)
        reply = await peer.reply()
        assert reply is not None
        return reply


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (b"TASK REQ:nosuch IN:TEST OUT:ECHO\n\n", "unknown_op"),
        (b"TASK REQ:echo IN:WEB OUT:ECHO\nTEXT a\n\n", "wrong_domain"),
        (b"TASK REQ:echo IN:TEST OUT:CONTENT\nTEXT a\n\n", "wrong_out"),
        (b"TASK REQ:echo IN:TEST OUT:ECHO\n\n", "missing_field"),
        (b"TASK REQ:echo IN:TEST OUT:ECHO\nTEXT a\nCOLOR red\n\n", "unknown_field"),
        (b"TASK REQ:echo IN:TEST OUT:ECHO\nTEXT a\nTEXT b\n\n", "duplicate_field"),
        (b"TASK REQ:echo hi IN:TEST OUT:ECHO\nTEXT a\n\n", "duplicate_field"),
        (b"TASK REQ:echo IN:TEST OUT:ECHO\nTEXT a\nCOUNT x\n\n", "invalid_field"),
        (b"TASK REQ:echo IN:TEST OUT:ECHO\nTEXT a\nMODE c\n\n", "invalid_field"),
        (b"TASK REQ:echo IN:TEST OUT:ECHO\nTEXT a\nLOUD yes\n\n", "invalid_field"),
        (b"TASK REQ:echo IN:TEST OUT:ECHO\nTEXT a\nPARAMS {nope\n\n", "invalid_field"),
        (b'TASK REQ:echo IN:TEST OUT:ECHO\nTEXT a\nPARAMS {"a":1,"a":2}\n\n', "invalid_field"),
        (b'TASK REQ:echo IN:TEST OUT:ECHO\nTEXT "  "\n\n', "invalid_field"),
        (b"TASK REQ:echo IN:TEST OUT:ECHO\nTEXT a\nID bad id\n\n", "invalid_field"),
        (b"TASK REQ:echo IN:TEST OUT:ECHO\nTEXT a\nID a\nID b\n\n", "duplicate_field"),
        (b"TASK REQ:ping x IN:SYS OUT:PONG\n\n", "unknown_field"),
    ],
)
async def test_bad_task_gets_fail_with_catalogue_code(
    config: Config, frame: bytes, code: str
) -> None:
    """D-2, D-3, D-4, C-1: lookup and field errors are FAIL replies with their codes."""
    reply = await _one(config, frame)
    assert _error(reply) == code
    assert reply.get("SCOPE") == "[]"
    assert reply.get("DATA") == "none"


async def test_fields_are_typed_before_the_handler_runs(config: Config) -> None:
    """D-3, D-4: inline text fills the declared field; defaults apply; repeats keep order."""
    frame = (
        b"TASK REQ:echo hello IN:TEST OUT:ECHO\nCOUNT 3\nTAG x\nTAG y\nLOUD TRUE\n"
        b'PARAMS {"a": 1}\n\n'
    )
    reply = await _one(config, frame)
    assert reply == Reply(
        Status.OK,
        (
            ("SCOPE", "[test]"),
            ("DATA", "echo"),
            ("TEXT", "hello"),
            ("COUNT", "3"),
            ("TAG", "x"),
            ("TAG", "y"),
            ("MODE", "a"),
            ("LOUD", "true"),
            ("PARAMS", "{'a': 1}"),
        ),
    )


@pytest.mark.parametrize(("count", "ok"), [("10", True), ("11", False), ("1", True), ("0", False)])
async def test_integer_bounds_hold_at_n_and_n_plus_1(config: Config, count: str, ok: bool) -> None:
    reply = await _one(
        config, f"TASK REQ:echo IN:TEST OUT:ECHO\nTEXT a\nCOUNT {count}\n\n".encode()
    )
    assert (reply.status is Status.OK) is ok


@pytest.mark.parametrize(
    ("count", "error"),
    [
        ("9" * 30, "invalid_field:COUNT above 10"),
        ("-" + "9" * 30, "invalid_field:COUNT below 1"),
        ("0" * 30 + "7", None),
        ("1e3", "invalid_field:COUNT must be an integer"),
    ],
)
async def test_an_integer_past_int64_is_out_of_bounds_not_malformed(
    config: Config, count: str, error: str | None
) -> None:
    reply = await _one(
        config, f"TASK REQ:echo IN:TEST OUT:ECHO\nTEXT a\nCOUNT {count}\n\n".encode()
    )
    assert reply.get("ERROR") == error, reply
    if error is None:
        assert reply.get("COUNT") == "7"


@pytest.mark.parametrize("length", [ECHOED_NAME_CHARS, ECHOED_NAME_CHARS + 1])
async def test_an_unknown_op_is_named_whole_up_to_the_echo_bound_then_cut(
    config: Config, length: int
) -> None:
    """A 3,000-character REQ is not echoed whole into the reply and the audit: its name is
    cut at the bound and its length said."""
    name = "z" * length
    reply = await _one(config, f"TASK REQ:{name} IN:TEST OUT:ECHO\n\n".encode())
    cut = f"{name[:ECHOED_NAME_CHARS]}... ({length} characters)"
    expected = name if length == ECHOED_NAME_CHARS else cut
    assert reply.get("ERROR") == f"unknown_op:{expected}"


@pytest.mark.parametrize(("text", "ok"), [("x" * 10, True), ("x" * 11, False)])
async def test_text_length_cap_holds_at_n_and_n_plus_1(config: Config, text: str, ok: bool) -> None:
    reply = await _one(config, f"TASK REQ:echo IN:TEST OUT:ECHO\nTEXT {text}\n\n".encode())
    assert (reply.status is Status.OK) is ok


@pytest.mark.parametrize(("depth", "ok"), [(MAX_JSON_DEPTH, True), (MAX_JSON_DEPTH + 1, False)])
async def test_json_nesting_depth_holds_at_n_and_n_plus_1(
    config: Config, depth: int, ok: bool
) -> None:
    """D-3: a JSON field nested past MAX_JSON_DEPTH is invalid_field (brackets in strings
    do not count)."""
    value = '{"k": "]]]["}'
    for level in range(depth - 1):
        value = f"[{value}]" if level % 2 else f'{{"a": {value}}}'
    frame = f"TASK REQ:echo IN:TEST OUT:ECHO\nTEXT a\nPARAMS {value}\n\n".encode()
    reply = await _one(config, frame)
    assert (reply.status is Status.OK) is ok, reply
    if not ok:
        assert _error(reply) == "invalid_field"


async def test_json_field_nested_200k_deep_replies_invalid_field_not_internal_error(
    config: Config,
) -> None:
    """Issue 8.13: json.loads on this raised RecursionError, answered internal_error."""
    frame = b"TASK REQ:echo IN:TEST OUT:ECHO\nTEXT a\nID j1\nPARAMS " + b"[" * 200_000 + b"\n\n"
    reply = await _one(config, frame)
    assert reply == Reply(
        Status.FAIL,
        (
            ("ID", "j1"),
            ("SCOPE", "[]"),
            ("DATA", "none"),
            ("ERROR", f"invalid_field:PARAMS nests deeper than {MAX_JSON_DEPTH} levels"),
        ),
    )


def test_every_json_field_of_every_op_bounds_its_depth() -> None:
    """Each JSON-typed field the daemon serves (exec ENV, api PAYLOAD...) goes through the
    one bounded parse."""
    ops = op_table(SPECIALISTS)
    json_fields = [(op, spec) for op in ops for spec in op.fields if spec.kind == "json"]
    assert json_fields
    for op, spec in json_fields:
        required = [(s.name, "x") for s in op.fields if s.required and s.name != spec.name]
        deep = (spec.name, "[" * 200_000 + "]" * 200_000)
        task = Task(op.req, op.domain, op.out, fields=(*required, deep))
        with pytest.raises(FieldError) as caught:
            validate(task, op.fields, op.inline)
        assert caught.value.code is ErrorCode.INVALID_FIELD, (op.req, spec.name)


# Where a lone surrogate may hide in a JSON field's text: a value, a key, deep inside, either
# half, a high half followed by an escape that is not a low one.
_LONE_SURROGATES = [
    '{"K": "\\ud800"}',
    '{"\\udfff": "v"}',
    '{"K": [1, {"L": ["x\\ud83dy"]}]}',
    '"\\udc00"',
    '["\\ud83d\\u0041"]',
]


@pytest.mark.parametrize("text", _LONE_SURROGATES)
def test_every_json_field_of_every_op_refuses_a_lone_surrogate(text: str) -> None:
    """V-2 holds for JSON field values too: json decodes ``\\ud800`` to a lone surrogate,
    which no UTF-8 peer can read; exec's ENV reached Popen, api's PAYLOAD its body's encode
    and node's PARAMS the frame to the node with it, each an internal_error."""
    ops = op_table(SPECIALISTS)
    json_fields = [(op, spec) for op in ops for spec in op.fields if spec.kind == "json"]
    assert json_fields
    for op, spec in json_fields:
        required = [
            (s.name, s.choices[0] if s.choices else "x")
            for s in op.fields
            if s.required and s.name != spec.name
        ]
        task = Task(op.req, op.domain, op.out, fields=(*required, (spec.name, text)))
        with pytest.raises(FieldError) as caught:
            validate(task, op.fields, op.inline)
        assert (caught.value.code, caught.value.detail) == (
            ErrorCode.INVALID_FIELD,
            f"{spec.name} holds a lone surrogate",
        ), (op.req, spec.name)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"K": "\\ud83d\\ude00"}', {"K": "\U0001f600"}),  # a pair is one character
        ('{"K": "\\\\ud800"}', {"K": "\\ud800"}),  # an escaped backslash, then text
        ('{"K": "\u00e9\\u00e9"}', {"K": "\u00e9\u00e9"}),
    ],
)
def test_a_json_field_keeps_surrogate_pairs_and_escaped_backslashes(text: str, value: Any) -> None:
    spec = FieldSpec("PARAMS", "json")
    params = validate(Task("echo", "TEST", "ECHO", fields=(("PARAMS", text),)), (spec,), None)
    assert params.json("PARAMS") == value


async def test_a_lone_surrogate_in_a_json_field_replies_invalid_field_not_internal_error(
    config: Config,
) -> None:
    frame = b'TASK REQ:echo IN:TEST OUT:ECHO\nTEXT a\nID s1\nPARAMS {"a":"\\ud800"}\n\n'
    reply = await _one(config, frame)
    assert reply == Reply(
        Status.FAIL,
        (
            ("ID", "s1"),
            ("SCOPE", "[]"),
            ("DATA", "none"),
            ("ERROR", "invalid_field:PARAMS holds a lone surrogate"),
        ),
    )


@pytest.mark.parametrize(("depth", "ok"), [(MAX_JSON_DEPTH, True), (MAX_JSON_DEPTH + 1, False)])
def test_mcp_params_text_field_has_the_same_depth_bound(depth: int, ok: bool) -> None:
    """MCP's PARAMS is parsed by the mcp op itself, under the same bound."""
    from specialists.tool.mcp.render import parse_params

    text = '{"a": ' * depth + "1" + "}" * depth
    if ok:
        assert parse_params(text)["a"]
    else:
        with pytest.raises(OpError) as caught:
            parse_params(text)
        assert caught.value.code is ErrorCode.INVALID_FIELD


@pytest.mark.parametrize(("ms", "ok"), [(600_000, True), (600_001, False)])
async def test_timeout_ms_is_capped_by_config_at_n_and_n_plus_1(
    config: Config, ms: int, ok: bool
) -> None:
    """C-4: TIMEOUT_MS above tasks.max_timeout_ms is invalid_field."""
    reply = await _one(config, f"TASK REQ:ping IN:SYS OUT:PONG\nTIMEOUT_MS {ms}\n\n".encode())
    assert (reply.status is Status.OK) is ok, reply


async def test_deadline_cancels_work_and_replies_timeout_exceeded(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """C-4: the reply names the deadline in ms."""
    reply = await _one(config, b"TASK REQ:sleep 5000 IN:TEST OUT:SLEPT\nTIMEOUT_MS 250\nID t1\n\n")
    assert reply == Reply(
        Status.FAIL,
        (
            ("ID", "t1"),
            ("SCOPE", "[]"),
            ("DATA", "none"),
            ("ERROR", "timeout_exceeded:250ms"),
        ),
    )


async def test_work_within_its_deadline_completes(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    reply = await _one(config, b"TASK REQ:sleep 200 IN:TEST OUT:SLEPT\nTIMEOUT_MS 250\n\n")
    assert reply.get("DATA") == "slept:200"


async def test_handler_bug_becomes_internal_error_and_connection_goes_on(config: Config) -> None:
    """E-2: an unexpected exception is internal_error with a reference; the next frame runs."""
    async with open_harness(config) as harness:
        peer = harness.connect()
        await peer.send(b"TASK REQ:boom IN:TEST OUT:NOTHING\n\nTASK REQ:ping IN:SYS OUT:PONG\n\n")
        boom, ping = await peer.replies(2)
    assert _error(boom) == "internal_error"
    assert (boom.get("ERROR") or "").startswith("internal_error:ref ")
    assert ping.get("DATA") == "pong"


@pytest.mark.parametrize(("extra", "busy"), [(0, 0), (1, 1)])
async def test_specialist_admits_running_plus_queued_then_busy(
    config: Config, autojump_clock: trio.testing.MockClock, extra: int, busy: int
) -> None:
    """C-3: 2 running + 3 queued are admitted; one more gets busy at once, never a hang."""
    limits = SlotsConfig(web=SlotLimits(max_running=2, max_queued=3))
    config = replace(config, tasks=TasksConfig(specialists=limits))
    frames = b"".join(
        f"TASK REQ:sleep 1000 IN:TEST OUT:SLEPT\nID s{n}\n\n".encode() for n in range(5 + extra)
    )
    async with open_harness(config) as harness:
        peer = harness.connect()
        await peer.send(frames)
        replies = await peer.replies(5 + extra)
    errors = [_error(r) for r in replies if r.status is Status.FAIL]
    assert errors == ["busy"] * busy
    assert sum(r.status is Status.OK for r in replies) == 5


@pytest.mark.parametrize(("extra", "busy"), [(0, 0), (1, 1)])
async def test_the_sys_pool_admits_its_configured_running_plus_queued_then_busy(
    config: Config, autojump_clock: trio.testing.MockClock, extra: int, busy: int
) -> None:
    """C-3: IN:SYS ops run in their own pool, limited by tasks.specialists.sys (5 + 10 by
    default, shown in config.yaml): the 16th at once is busy."""
    sys_sleep = replace(TEST_OPS[0], req="sys-sleep", domain="SYS", specialist="sys")
    frames = b"".join(
        f"TASK REQ:sys-sleep 1000 IN:SYS OUT:SLEPT\nID s{n}\n\n".encode() for n in range(15 + extra)
    )
    async with open_harness(config, [sys_sleep]) as harness:
        peer = harness.connect()
        await peer.send(frames)
        replies = await peer.replies(15 + extra)
    assert config.tasks.specialists.sys == SlotLimits(max_running=5, max_queued=10)
    assert [_error(r) for r in replies if r.status is Status.FAIL] == ["busy"] * busy
    assert sum(r.status is Status.OK for r in replies) == 15


def test_a_pool_without_limits_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        SlotsConfig().pool("browser")
    with pytest.raises(KeyError):
        SlotsConfig().pool("__class__")


async def test_busy_reply_comes_while_the_admitted_work_still_runs(
    config: Config, mock_clock: trio.testing.MockClock
) -> None:
    """C-3: a refused task is answered at once; virtual time stands still until we jump it."""
    limits = SlotsConfig(web=SlotLimits(max_running=1, max_queued=1))
    config = replace(config, tasks=TasksConfig(specialists=limits))
    frames = b"".join(
        f"TASK REQ:sleep 1000 IN:TEST OUT:SLEPT\nID s{n}\n\n".encode() for n in range(3)
    )
    async with open_harness(config) as harness:
        peer = harness.connect()
        await peer.send(frames)
        first = await peer.reply()
        assert first is not None
        assert _error(first) == "busy"  # which of the three is refused is up to the scheduler
        assert harness.dispatcher.stats.in_flight == 2
        mock_clock.jump(1.5)
        second = await peer.reply()
        mock_clock.jump(1.5)
        third = await peer.reply()
    assert second is not None
    assert third is not None
    assert {second.id, third.id, first.id} == {"s0", "s1", "s2"}
    assert second.get("DATA") == third.get("DATA") == "slept:1000"


async def test_sys_ops_list_every_op_with_fields(config: Config) -> None:
    """D-1: REQ:ops is generated from the registry."""
    reply = await _one(config, b"TASK REQ:ops IN:SYS OUT:OPS\n\n")
    ops = reply.get_all("OP")
    assert reply.get("DATA") == f"ops:{len(ops)}"
    assert any(
        '"req":"echo"' in op and '"inline":"TEXT"' in op and '"max_chars":10' in op for op in ops
    )
    assert {op.split('"req":"')[1].split('"')[0] for op in ops} == {
        "cancel",
        "ping",
        "ops",
        "stats",
        "sleep",
        "boom",
        "echo",
    }


async def test_stats_count_frames_rejections_and_latency(config: Config) -> None:
    async with open_harness(config) as harness:
        peer = harness.connect()
        await peer.send(b"TASK REQ:ping IN:SYS OUT:PONG\n\nTASK REQ:nope IN:SYS OUT:X\n\n")
        await peer.replies(2)  # frames of one step may run in any order; stats comes after
        await peer.send(b"TASK REQ:stats IN:SYS OUT:STATS\n\n")
        stats = await peer.reply()
    assert stats is not None
    data = dict(item.split(":") for item in (stats.get("DATA") or "").split(","))
    assert data["frames"] == "3"
    assert "REJECTED" in dict(stats.fields)
    assert "unknown_op:1" in stats.get_all("REJECTED")
    assert any(op.startswith("ping count:1,failed:0,p50_ms:") for op in stats.get_all("OP"))


async def test_a_daemon_composed_without_a_memory_path_audits_nothing_and_says_so_in_stats(
    config: Config,
) -> None:
    """Issue 7: ``memory=None`` (a Memory Specialist's own composition): no outbox, no audit;
    REQ:stats has no OUTBOX line and an outbox depth of 0; ops run as usual."""
    dispatcher = build_dispatcher(config, None, TEST_OPS, None)
    echo = await dispatcher.run(Task("echo", "TEST", "ECHO", "hi", ()), Peer("t"))
    stats = await dispatcher.run(Task("stats", "SYS", "STATS", None, ()), Peer("t"))
    assert echo.status is Status.OK
    assert not dispatcher.audit
    assert stats.get_all("OUTBOX") == []
    assert "outbox_depth:0" in (stats.get("DATA") or "")


async def test_an_op_that_remembers_in_a_daemon_without_memory_is_an_internal_error(
    config: Config,
) -> None:
    """Composing an op that writes memory into a daemon with no memory path is a bug: its
    ``ctx.remember`` raises RuntimeError, answered internal_error like any other bug."""

    async def remembers(params: Params, ctx: OpContext, _: Any) -> Result:
        await ctx.remember("tool", "note", "notes", "x")
        return Result("kept")

    op: Op[Any] = Op("remember", "TEST", "KEPT", "tool", remembers)
    dispatcher = build_dispatcher(config, None, [op], None)
    reply = await dispatcher.run(Task("remember", "TEST", "KEPT", None, ()), Peer("t"))
    assert _error(reply) == "internal_error"


def test_an_op_in_a_pool_without_slot_limits_cannot_be_composed(config: Config) -> None:
    """Issue 7: forgetting a pool's limits is an error at composition, never a default."""

    async def nothing(params: Params, ctx: OpContext, _: Any) -> Result:
        return Result("none")

    op: Op[Any] = Op("nothing", "TEST", "NONE", "browser", nothing)
    with pytest.raises(KeyError, match="browser"):
        build_dispatcher(config, None, [op], None)


async def test_only_an_instant_sys_op_with_a_free_slot_is_answered_now(
    config: Config,
) -> None:
    """L-4, C-3: ping, ops and stats never wait, so ``try_now`` answers them (a connection
    runs them in its reader); not an IN:SYS op that sleeps, nor an unknown one, nor a ping
    while the sys pool is full: those get None and run as tasks of their own."""
    sys_sleep = replace(TEST_OPS[0], req="sys-sleep", domain="SYS", specialist="sys")
    dispatcher = build_dispatcher(config, None, [sys_sleep], None)
    peer = Peer("a")
    for req, out in (("ping", "PONG"), ("ops", "OPS"), ("stats", "STATS")):
        reply = await dispatcher.try_now(Task(req, "SYS", out, None, (("ID", req),)), peer)
        assert reply is not None
        assert reply.status is Status.OK
        assert reply.id == req
    assert await dispatcher.try_now(Task("sys-sleep", "SYS", "SLEPT"), peer) is None
    assert await dispatcher.try_now(Task("nope", "SYS", "PONG"), peer) is None
    assert await dispatcher.try_now(Task("ping", "SYS", "WRONG"), peer) is None
    pool = dispatcher.slots("sys")
    taken = [pool.take_now() for _ in range(pool.max_running)]
    assert all(taken)
    assert await dispatcher.try_now(Task("ping", "SYS", "PONG"), peer) is None  # N of N running
    pool.release()
    assert await dispatcher.try_now(Task("ping", "SYS", "PONG"), peer) is not None  # N-1
    assert pool.running == pool.max_running - 1  # its slot was given back


async def test_an_instant_op_answered_now_is_validated_and_counted_as_any_task(
    config: Config,
) -> None:
    """C-1, R-6: ``try_now`` validates as ``run`` does (a bad ID is ``invalid_field``,
    an unknown field ``unknown_field``) and counts each frame in the stats."""
    dispatcher = build_dispatcher(config, None, [], None)
    peer = Peer("a")
    bad_id = await dispatcher.try_now(Task("ping", "SYS", "PONG", None, (("ID", "a b"),)), peer)
    stray = await dispatcher.try_now(Task("ping", "SYS", "PONG", None, (("X", "1"),)), peer)
    direct = await dispatcher.run(Task("ping", "SYS", "PONG", None, (("X", "1"),)), peer)
    assert bad_id is not None
    assert stray is not None
    assert _error(bad_id) == "invalid_field"
    assert stray == direct
    assert _error(stray) == "unknown_field"
    assert dispatcher.stats.frames == 3


@pytest.mark.parametrize("ms", ["0", "x", "600001"])
async def test_an_instant_op_answered_now_checks_its_timeout_ms(config: Config, ms: str) -> None:
    """C-4: a frame with fields has its TIMEOUT_MS read on the fast path too."""
    dispatcher = build_dispatcher(config, None, [], None)
    task = Task("ping", "SYS", "PONG", None, (("ID", "p"), ("TIMEOUT_MS", ms)))
    reply = await dispatcher.try_now(task, Peer("a"))
    assert reply is not None
    assert (reply.id, _error(reply)) == ("p", "invalid_field")


@pytest.mark.parametrize("extra", [0, 1])
async def test_the_instant_op_table_stays_bounded_under_invented_names(
    config: Config, extra: int
) -> None:
    """A peer inventing IN:SYS names cannot grow the dispatcher's table of instant ops past
    its bound (N names fill it, the N+1th starts it afresh); each still gets its reply."""
    dispatcher = build_dispatcher(config, None, [], None)
    peer = Peer("a")
    bound = dispatcher_module._MAX_INSTANT_HEADERS
    for n in range(bound + extra):
        assert await dispatcher.try_now(Task(f"nope{n}", "SYS", "PONG"), peer) is None
    assert len(dispatcher._instant) == (1 if extra else bound)
    reply = await dispatcher.try_now(Task("ping", "SYS", "PONG"), peer)
    assert reply is not None
    assert reply.status is Status.OK


async def test_a_ping_behind_a_full_sys_pool_queues_in_a_task_of_its_own_and_is_answered(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """C-3: with every sys slot held by a sleeping IN:SYS op, a ping is not run in the reader
    (it would wait there): it queues for a slot like any op and is answered after them."""
    sys_sleep = replace(TEST_OPS[0], req="sys-sleep", domain="SYS", specialist="sys")
    frames = b"".join(
        f"TASK REQ:sys-sleep 1000 IN:SYS OUT:SLEPT\nID s{n}\n\n".encode() for n in range(5)
    )
    async with open_harness(config, [sys_sleep]) as harness:
        peer = harness.connect()
        await peer.send(frames)
        await trio.testing.wait_all_tasks_blocked()
        pool = harness.dispatcher.slots("sys")
        assert pool.running == pool.max_running == 5
        started = trio.current_time()
        await peer.send(b"TASK REQ:ping IN:SYS OUT:PONG\nID p\n\n")
        (first,) = await peer.replies(1)
        answered_after_s = trio.current_time() - started  # the mock clock: no real wait
        replies = [first, *await peer.replies(5)]
    assert answered_after_s >= 1.0  # it waited for a sleep's slot, not run in the reader
    assert sorted(r.id or "" for r in replies) == ["p", "s0", "s1", "s2", "s3", "s4"]
    assert {r.status for r in replies} == {Status.OK}


@pytest.mark.parametrize("extra", [0, 1])
def test_the_field_names_table_stays_bounded_and_never_confuses_two_ops(extra: int) -> None:
    """``validate`` remembers each op's field names by its specs tuple: N tuples fill the
    table, the N+1th starts it afresh, and a tuple made where a dead one stood (the same
    id) is judged by its own names."""
    bound = fields_module._NAMES_BOUND
    fields_module._NAMES.clear()  # the table is the process's: other tests filled some of it
    for n in range(bound + extra):
        specs = (FieldSpec(f"F{n}"),)
        params = validate(Task("x", "TEST", "X", None, ((f"F{n}", "v"),)), specs, None)
        assert params.text(f"F{n}") == "v"
        with pytest.raises(FieldError) as error:
            validate(Task("x", "TEST", "X", None, (("F", "v"),)), specs, None)
        assert error.value.code is ErrorCode.UNKNOWN_FIELD
        del specs
        assert len(fields_module._NAMES) <= bound
    assert len(fields_module._NAMES) == (1 if extra else bound)
