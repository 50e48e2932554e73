"""Counters and latency percentiles behind ``REQ:stats`` (kept in memory, bounded)."""

from __future__ import annotations

import bisect
import datetime
import json
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from protocol import ErrorCode

_WINDOW = 1024  # latencies kept per op: enough for a stable p99 at O(1) memory
# The metrics' latency histogram (docs/metrics.md), upper bounds in ms: the Prometheus
# client's default buckets (5 ms to 10 s) with 1 ms below for the IN:SYS ops and 30 s, 60 s
# and 300 s above for exec and research. Counted per op as it ends: a bisect and an add.
LATENCY_BUCKETS_MS: tuple[int, ...] = (1, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500)
LATENCY_BUCKETS_MS += (5000, 7500, 10000, 30000, 60000, 300000)
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
    # Since start, for the metrics: replies by (status, error code or ""), and the latency
    # histogram (one count per LATENCY_BUCKETS_MS bound, the last past them all) with its sum.
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_MS) + 1))
    total_ms: float = 0.0

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

    def record(self, op_name: str, duration_ms: float, error_code: str | None, status: str) -> None:
        """Count one reply of ``op_name`` (``status``; ``error_code`` when it failed)."""
        entry = self.ops.get(op_name)
        if entry is None:
            entry = self.ops[op_name] = OpStats()
        entry.count += 1
        entry.latencies_ms.append(duration_ms)
        entry.buckets[bisect.bisect_left(LATENCY_BUCKETS_MS, duration_ms)] += 1
        entry.total_ms += duration_ms
        if error_code is not None:
            entry.failed += 1
            self.reject(error_code)
            error_code = error_code if error_code in _CODES else OTHER_CODE
        entry.outcomes[status, error_code or ""] += 1

    def reject(self, code: str) -> None:
        """Count a FAIL that happened before any op ran (parse errors, unknown ops); a code
        not in the catalogue counts as ``OTHER_CODE``, so the table stays bounded."""
        self.rejections[code if code in _CODES else OTHER_CODE] += 1
