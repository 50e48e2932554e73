"""The outbox's side of CSP/1: a batch of writes as frames (SPEC M-1), and the Memory
Specialist's answers sorted into acknowledged, rejected and to retry (SPEC M-2)."""

from __future__ import annotations

import re

from csp_web.core.api.records import MemoryWrite
from protocol import Reply, Status, serialize

# FAIL codes that say "not now" rather than "never": such writes stay pending (SPEC M-2).
_TRANSIENT = frozenset(
    {
        "busy",
        "shutting_down",
        "timeout_exceeded",
        "internal_error",
        "outbox_full",
        "rate_limited",
        "memory_unavailable",
        "storage_full",  # the Memory Specialist's disk is full: kept, sent again (SPEC O-6)
    }
)


def batch_frames(rows: list[tuple[int, MemoryWrite]]) -> tuple[list[str], bytes]:
    """The IDs of a batch's writes and the bytes of their frames, in order (SPEC M-1)."""
    return [w.id for _, w in rows], "".join(map(write_frame, (w for _, w in rows))).encode()


# A character that may not stand raw on a line (``protocol``'s rule, V-3; TAB and LF included).
_NOT_RAW_CHAR = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def write_frame(write: MemoryWrite) -> str:
    """``serialize(write.to_task())`` as text: the frame's constant parts written once, its
    five values raw when each may stand raw (an audit record always may), else the codec's
    serialisation (quoting) of the whole frame."""
    values = (write.id, write.source, write.type, write.path, write.data)
    if all(map(_raw, values)):
        return (
            f"TASK REQ:write IN:MEMORY OUT:ACK\nID {write.id}\nFROM {write.source}\n"
            f"TYPE {write.type}\nPATH {write.path}\nDATA {write.data}\n\n"
        )
    return serialize(write.to_task()).decode("utf-8")


def _raw(value: str) -> bool:
    """Whether ``value`` may stand raw on a line: not empty, no quote or space at its start,
    no space at its end, no control character. ASCII (an audit record's JSON always is) is
    checked by ``str.isprintable``, whose non-printable ASCII are the controls and DEL: an
    audit write's frame (a 465-character record) in 4.5 against 24.6 us of CPU with one regex
    of the controls, a quote or space at the start and a space at the end (issue 26)."""
    if not value or value[0] in '" ' or value[-1] == " ":
        return False
    if value.isascii():
        return value.isprintable()
    return _NOT_RAW_CHAR.search(value) is None


def sort_replies(
    rows: list[tuple[int, MemoryWrite]], replies: list[Reply]
) -> tuple[list[int], list[tuple[int, str]], set[int]]:
    """(acknowledged seqs, rejected (seq, error), seqs to retry) for one delivered batch."""
    acked: list[int] = []
    rejected: list[tuple[int, str]] = []
    retry: set[int] = set()
    for (seq, _), reply in zip(rows, replies, strict=True):
        error = reply.get("ERROR") or "FAIL"
        if reply.status is not Status.FAIL:
            acked.append(seq)
        elif error.partition(":")[0] in _TRANSIENT:
            retry.add(seq)
        else:
            rejected.append((seq, error))
    return acked, rejected, retry
