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
