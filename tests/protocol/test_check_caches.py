"""The caches of checked keys and headers that spare the codec a regex per field and frame:
bounded however many distinct names a peer sends, and never a way around a check."""

from __future__ import annotations

import pytest

from protocol import Connection, ErrorCode, ProtocolError, Reply, Status, Task
from protocol._frames import _KNOWN_HEADERS, KNOWN_KEYS


def test_checked_names_are_remembered_up_to_a_bound_and_checks_still_apply_past_it() -> None:
    """Past 4,096 distinct keys and headers nothing more is remembered, and a bad key or op
    name is still refused."""
    for n in range(5000):
        Task(f"op{n}", "SYS", "PONG", None, ((f"K{n}", "v"),))
        Reply(Status.OK, ((f"R{n}", "v"),))
    assert len(KNOWN_KEYS) <= 4096
    assert len(_KNOWN_HEADERS) <= 4096
    with pytest.raises(ValueError, match="invalid field key"):
        Task("ping", "SYS", "PONG", None, (("bad key", "v"),))
    with pytest.raises(ValueError, match="invalid op name"):
        Task("Ping", "SYS", "PONG")
    with pytest.raises(ValueError, match="IN and OUT"):
        Task("ping", "sys", "PONG")
    codec = Connection()
    codec.receive_data(b"TASK REQ:ping IN:SYS OUT:PONG\nK9999 v\nlower v\n\n")
    with pytest.raises(ProtocolError) as bad:
        codec.next_event()
    assert bad.value.code is ErrorCode.BAD_FRAME


def test_remembered_task_headers_parse_as_a_fresh_parse_does_and_stay_bounded() -> None:
    """F-3: a header parsed again comes from the table of parsed headers, equal to a first
    parse (inline text decoded, fields its own); a bad header is refused every time; the table
    holds at most MAX_REMEMBERED_HEADERS (N) entries: the N+1-th distinct one starts it anew."""
    from protocol import _grammar

    wires = [
        b"TASK REQ:ping IN:SYS OUT:PONG\nID a\n\n",
        b"TASK REQ:ping IN:SYS OUT:PONG\nID b\n\n",
        b'TASK REQ:fetch "a IN:B OUT:C" IN:WEB OUT:PAGE\n\n',
        b'TASK REQ:fetch "a IN:B OUT:C" IN:WEB OUT:PAGE\n\n',
    ]
    frames = []
    for wire in wires:
        codec = Connection()
        codec.receive_data(wire)
        frames.append(codec.next_event())
    assert frames == [
        Task("ping", "SYS", "PONG", None, (("ID", "a"),)),
        Task("ping", "SYS", "PONG", None, (("ID", "b"),)),
        Task("fetch", "WEB", "PAGE", "a IN:B OUT:C"),
        Task("fetch", "WEB", "PAGE", "a IN:B OUT:C"),
    ]
    for _ in range(2):
        codec = Connection()
        codec.receive_data(b"TASK REQ:Ping IN:SYS OUT:PONG\n\n")
        with pytest.raises(ProtocolError) as bad:
            codec.next_event()
        assert bad.value.code is ErrorCode.BAD_HEADER
    limit = _grammar.MAX_REMEMBERED_HEADERS
    _grammar._HEADERS.clear()
    for n in range(limit):
        _grammar.parse_frame([f"TASK REQ:op{n} IN:SYS OUT:PONG".encode()])
    assert len(_grammar._HEADERS) == limit  # N
    _grammar.parse_frame([b"TASK REQ:one-more IN:SYS OUT:PONG"])
    assert list(_grammar._HEADERS) == ["one-more IN:SYS OUT:PONG"]  # N+1: anew
