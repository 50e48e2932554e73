"""The node link's pure parts: pairing codes, the attempt limiter, the store file, media
assembly and reply schemas (no I/O but the store's own file)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
import trio
import trio.testing

from csp_web.core.api.errors import OpError
from protocol import NEED_DATA, Connection, Reply, Status, Task
from specialists.node.agent import EXIT_UNREACHABLE, NodeAgent, NodeOptions, _print_code
from specialists.node.results import MediaAssembly, check_reply
from specialists.node.store import (
    AttemptLimiter,
    NodeStore,
    PairsFull,
    PendingPairs,
    hash_token,
    normal_code,
)
from specialists.node.wire import Hello, MediaInfo, parse_hello, parse_media

HELLO = Hello("lab1", "Linux/test", ("notify",))


def test_a_pairing_code_is_single_use_and_expires_after_its_ttl() -> None:
    """N-4: usable until ttl, gone at ttl; taken once."""
    pairs = PendingPairs(ttl_s=300.0, max_pending=16)
    first = pairs.add(HELLO, "uid:0", now=0.0)
    second = pairs.add(HELLO, "uid:0", now=0.0)
    assert pairs.take(first.code.lower(), now=299.9) is first
    assert pairs.take(first.code, now=299.9) is None
    assert pairs.take(second.code, now=300.0) is None


def test_pending_pairings_are_capped_at_max_pending() -> None:
    """N-4: max_pending_pairs at N and N+1."""
    pairs = PendingPairs(ttl_s=300.0, max_pending=2, max_per_source=2)
    pairs.add(HELLO, "a", 0.0)
    pairs.add(HELLO, "b", 0.0)
    with pytest.raises(PairsFull, match="too many pairings wait"):
        pairs.add(HELLO, "c", 0.0)
    assert pairs.add(HELLO, "c", 300.0).source == "c"  # the first two expired


def test_pending_pairings_are_capped_per_source_at_n_and_n_plus_one() -> None:
    """N-4: max_pending_per_source (2) from one source, others unaffected; a code expires
    at its ttl and frees its source's slot."""
    pairs = PendingPairs(ttl_s=300.0, max_pending=16, max_per_source=2)
    pairs.add(HELLO, "ip:10.0.0.1", 0.0)
    pairs.add(HELLO, "ip:10.0.0.1", 100.0)
    with pytest.raises(PairsFull, match="2 pairings from this source wait"):
        pairs.add(HELLO, "ip:10.0.0.1", 299.9)
    assert pairs.add(HELLO, "ip:10.0.0.2", 299.9).source == "ip:10.0.0.2"
    assert pairs.add(HELLO, "ip:10.0.0.1", 300.0).source == "ip:10.0.0.1"
    assert [p.expires_at for p in pairs.waiting(300.0)] == [400.0, 599.9, 600.0]


def test_codes_are_eight_crockford_characters_typed_in_any_case() -> None:
    pair = PendingPairs(1.0, 1, 1).add(HELLO, "a", 0.0)
    assert len(pair.code) == 9
    assert pair.code[4] == "-"
    assert not set(pair.code) & set("ILOU")
    assert normal_code(pair.code.replace("-", "").lower()) == pair.code


def test_attempts_are_limited_per_source_in_a_sliding_window() -> None:
    """N-6: attempts at N pass, N+1 is refused; other sources and later windows are free."""
    limiter = AttemptLimiter(attempts=5, window_s=60.0)
    assert all(limiter.allow("uid:1", now=float(t)) for t in range(5))
    assert not limiter.allow("uid:1", now=5.0)
    assert limiter.allow("ip:10.0.0.2", now=5.0)
    assert limiter.allow("uid:1", now=60.0)  # the attempt at 0 left the window


def test_the_store_keeps_only_token_hashes_0600_and_reloads(tmp_path: Path) -> None:
    """N-5: tokens stored as SHA-256; the file 0600 in a 0700 folder."""
    folder = str(tmp_path / "nodes")
    store = NodeStore(folder, max_nodes=4)
    token = store.add(HELLO)
    path = os.path.join(folder, "nodes.json")
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    text = Path(path).read_text()
    assert token not in text
    assert json.loads(text)["nodes"][0]["token_sha256"] == hash_token(token)
    again = NodeStore(folder, max_nodes=4)
    assert again.check_token("lab1", token) is not None
    assert again.check_token("lab2", token) is None
    assert again.check_token("lab1", token[:-1] + "x") is None


def test_the_store_holds_at_most_max_nodes(tmp_path: Path) -> None:
    store = NodeStore(str(tmp_path), max_nodes=1)
    store.add(HELLO)
    with pytest.raises(ValueError, match="max_nodes"):
        store.add(Hello("lab2", "x", ()))


def test_a_hello_needs_a_well_formed_token() -> None:
    """N-2."""
    task = Task("hello", "NODE", "WELCOME", None, (("NAME", "a"), ("PLATFORM", "p")))
    with pytest.raises(OpError, match="TOKEN is missing"):
        parse_hello(task, token_required=True)


@pytest.mark.parametrize(("size", "ok"), [(10, True), (11, False)])
def test_media_assembly_holds_max_bytes_and_not_one_more(size: int, ok: bool) -> None:
    """N-10: max_media_bytes at N and N+1."""
    media = MediaAssembly(max_bytes=10)
    media.add(0, b"x" * 4)
    if ok:
        media.add(1, b"x" * (size - 4))
        assert media.size == size
        return
    with pytest.raises(OpError) as raised:
        media.add(1, b"x" * (size - 4))
    assert raised.value.code == "too_large"


def test_media_chunks_out_of_sequence_are_node_error() -> None:
    """N-10."""
    media = MediaAssembly(max_bytes=100)
    with pytest.raises(OpError) as raised:
        media.add(1, b"x")
    assert raised.value.code == "node_error"


def test_media_size_differing_from_its_media_line_is_node_error() -> None:
    """N-9."""
    media = MediaAssembly(max_bytes=100)
    media.add(0, b"abc")
    with pytest.raises(OpError, match="3 bytes, MEDIA says 4"):
        media.finish(MediaInfo("0" * 64, 4, "image/png"))


@pytest.mark.parametrize(
    "value",
    ["sha256:abc,bytes:1,type:image/png", f"sha256:{'a' * 64},bytes:-1,type:image/png", ""],
)
def test_a_malformed_media_line_is_refused(value: str) -> None:
    """N-9."""
    with pytest.raises(OpError):
        parse_media(value)


def _reply(*fields: tuple[str, str]) -> Reply:
    return Reply(Status.OK, (("ID", "d-1"), ("SCOPE", "[node]"), *fields))


@pytest.mark.parametrize(
    ("action", "fields", "ok"),
    [
        ("notify", (("DATA", "notified"),), True),
        ("notify", (("DATA", "notified!"),), False),
        ("camera_snap", (("DATA", "x"),), False),
        (
            "camera_snap",
            (("DATA", "media"), ("MEDIA", f"sha256:{'a' * 64},bytes:1,type:video/mp4")),
            False,
        ),
        (
            "screen_record",
            (("DATA", "media"), ("MEDIA", f"sha256:{'a' * 64},bytes:1,type:video/mp4")),
            True,
        ),
        ("canvas", (("DATA", "rendered"),), True),
        ("canvas", (("DATA", "x" * 4097),), False),
        ("location_get", (("DATA", "lat:1,lon:2"), ("WORK_MS", "1.5")), True),
        ("location_get", (("DATA", "lat:1,lon:2"), ("WORK_MS", "soon")), False),
        ("location_get", (("DATA", "lat:١,lon:2"),), False),  # \d took every script's digits
        ("location_get", (("DATA", "lat:1,lon:2"), ("WORK_MS", "١٢")), False),
    ],
)
def test_each_action_has_its_reply_schema(
    action: str, fields: tuple[tuple[str, str], ...], ok: bool
) -> None:
    """N-11, N-15: the schema per action, canvas included."""
    reply = _reply(*fields)
    if ok:
        check_reply(action, reply, max_text_chars=4096)
        return
    with pytest.raises(OpError) as raised:
        check_reply(action, reply, max_text_chars=4096)
    assert raised.value.code == "node_error"


async def test_a_malformed_frame_from_the_daemon_ends_the_nodes_link_without_a_crash(
    tmp_path: Path,
) -> None:
    """N-3's mirror: the node reads with the one read loop, so a frame it cannot parse ends
    its link (exit 3, the supervisor reconnects) instead of raising out of the agent."""
    ours, theirs = trio.testing.memory_stream_pair()
    options = NodeOptions(connect="unused", name="n1", token_file=str(tmp_path / "token"))
    agent = NodeAgent(theirs, options, {})
    codes: list[int] = []
    codec = Connection()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                codes.append(await agent.run())

            nursery.start_soon(run)
            while (event := codec.next_event()) is NEED_DATA:  # its pairing request
                codec.receive_data(await ours.receive_some(65536))
            assert isinstance(event, Task)
            assert event.req == "pair"
            await ours.send_all(b"NOT A FRAME\n\n")
    assert codes == [EXIT_UNREACHABLE]


PAIRING_LINE = "pairing code: 96WK-KWH3 (approve on the daemon: csp-web nodes approve 96WK-KWH3)\n"


def test_the_pairing_code_is_printed_on_stdout_and_on_stderr(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Printed only on stderr before, so a script reading the node's output missed it."""
    _print_code("96WK-KWH3")
    assert capfd.readouterr() == (PAIRING_LINE, PAIRING_LINE)


def test_the_pairing_code_is_printed_once_when_stdout_and_stderr_are_one_file(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A terminal (or ``2>&1``): one line, not the same line twice."""
    monkeypatch.setattr(sys, "stderr", sys.stdout)
    _print_code("96WK-KWH3")
    assert capfd.readouterr() == (PAIRING_LINE, "")


def test_the_pairing_code_goes_to_both_streams_when_they_have_no_descriptor(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _print_code("96WK-KWH3")
    assert capsys.readouterr() == (PAIRING_LINE, PAIRING_LINE)
