"""Counters and latency percentiles behind ``REQ:stats`` (kept in memory, bounded)."""

from __future__ import annotations

import datetime
import json
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from protocol import ErrorCode

_WINDOW = 1024  # latencies kept per op: enough for a stable p99 at O(1) memory
_CODES = frozenset(ErrorCode)
# A code outside the catalogue is counted under this one name: a relayed reply's ERROR is
# whatever the Memory Specialist wrote, and a counter keyed by it would grow for the daemon's
# lifetime (issue 21 §5), as the outbox's folded summary bounds REQ names ("other").
OTHER_CODE = "other"


@dataclass
class OpStats:
    count: int = 0
    failed: int = 0
    latencies_ms: deque[float] = field(default_factory=lambda: deque(maxlen=_WINDOW))

    def percentile(self, q: float) -> float:
        if not self.latencies_ms:
            return 0.0
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True)
class ReloadRecord:
    """The last SIGHUP: when (wall clock), ``applied`` or ``refused``, the changed settings
    applied and kept (needing a restart), or why the file was refused."""

    at: float
    outcome: str
    applied: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    error: str = ""

    def line(self) -> str:
        """The ``RELOAD`` line of ``REQ:stats``: one compact JSON object."""
        at = datetime.datetime.fromtimestamp(self.at, datetime.UTC)
        data: dict[str, object] = {
            "at": at.isoformat(timespec="seconds").replace("+00:00", "Z"),
            "outcome": self.outcome,
        }
        if self.outcome == "applied":
            data |= {"applied": list(self.applied), "kept": list(self.kept)}
        else:
            data["error"] = self.error
        return json.dumps(data, separators=(",", ":"))


class Stats:
    """What the daemon has seen since it started."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.frames = 0
        self.in_flight = 0
        self.connections = 0
        self.rejections: Counter[str] = Counter()
        self.ops: dict[str, OpStats] = {}
        self.last_reload: ReloadRecord | None = None

    @property
    def uptime_s(self) -> float:
        return time.monotonic() - self.started

    def record(self, op_name: str, duration_ms: float, error_code: str | None) -> None:
        entry = self.ops.setdefault(op_name, OpStats())
        entry.count += 1
        entry.latencies_ms.append(duration_ms)
        if error_code is not None:
            entry.failed += 1
            self.reject(error_code)

    def reject(self, code: str) -> None:
        """Count a FAIL that happened before any op ran (parse errors, unknown ops); a code
        not in the catalogue counts as ``OTHER_CODE``, so the table stays bounded."""
        self.rejections[code if code in _CODES else OTHER_CODE] += 1
