"""Audit summaries of IN:SYS frames (SPEC O-4): one record per connection and interval.

A ping costs the daemon a few microseconds; a durable audit record of its own (built, committed,
delivered, stored, acknowledged) costs several times that. IN:SYS ops change nothing, so their
audits are summarised: each connection has at most one open summary, counting its frames per
``IN/REQ`` (and error code), their IDs, failures, first and last time and longest duration. A
summary is written as one ``TYPE audit`` record

- when it holds ``audit.sys_summary_max_frames`` frames: the frame that fills it waits for
  the record to be durable before its reply (so with 1, every frame's record is, as for other
  ops: SPEC O-1's promise);
- ``audit.sys_summary_interval_s`` after its first frame (a timer, whatever the connection
  does);
- when its connection closes, and at daemon exit (``flush_all``).

Like every SYS audit it never uses the reserve: with the outbox full it is folded (SPEC O-3).
"""

from __future__ import annotations

import logging
import time
from collections import Counter

import trio

from csp_web.config import AuditConfig
from csp_web.core.api.context import Peer
from csp_web.core.api.ports import Outbound
from csp_web.core.api.records import MemoryWrite, json_record, make_write
from protocol import Reply, Status, Task

log = logging.getLogger(__name__)
# Summaries the timer writes per scheduler pass. Connections opened in a burst fall due
# together: 1,000 summaries built (and committed together in the next pass) in one step held
# every connection's reply for tens of ms (bench/fairness.py, issue 21 §5). 64 keeps the
# shared commit of a burst (a few passes' worth) and a step short.
TIMER_WRITES_PER_PASS = 64


class _Summary:
    """The open summary of one connection's IN:SYS frames."""

    __slots__ = ("due", "failed", "first", "frames", "ids", "last", "longest_ms", "ops", "peer")

    def __init__(self, peer: Peer, due: float) -> None:
        self.peer = peer
        self.due = due  # trio clock: when the timer writes it
        self.frames = 0
        self.failed = 0
        self.ops: Counter[str] = Counter()
        self.ids: list[str] = []
        self.first = self.last = time.time()
        self.longest_ms = 0.0

    def add(self, task: Task, reply: Reply, duration_ms: float) -> None:
        self.frames += 1
        key = f"{task.domain}/{task.req}"
        if reply.status is Status.FAIL:
            self.failed += 1
            key += ":" + (reply.get("ERROR") or "").partition(":")[0]
        self.ops[key] += 1
        if task.id is not None:
            self.ids.append(task.id)
        self.last = time.time()
        if duration_ms > self.longest_ms:
            self.longest_ms = duration_ms

    def record(self) -> str:
        peer = self.peer
        return json_record(
            summary="sys",
            connection=peer.connection,
            uid=peer.uid,
            pid=peer.pid,
            frames=self.frames,
            failed=self.failed,
            ops=dict(sorted(self.ops.items())),
            ids=self.ids,
            first=self.first,
            last=self.last,
            duration_ms_max=round(self.longest_ms, 3),
        )


class SysAudits:
    """The open summaries of a dispatcher's connections, written into ``outbox``."""

    def __init__(self, outbox: Outbound) -> None:
        self._outbox = outbox
        self._open: dict[str, _Summary] = {}  # by connection, oldest first
        self._timing = False

    def __len__(self) -> int:
        return len(self._open)

    def add(
        self, task: Task, peer: Peer, reply: Reply, duration_ms: float, config: AuditConfig
    ) -> _Summary | None:
        """Count one answered IN:SYS frame; the summary it filled (taken from the open ones),
        which ``write`` must then be awaited for, else None. A plain call: it runs once per
        pipelined ping, a coroutine only once per summary."""
        summary = self._open.get(peer.connection)
        if summary is None:
            due = trio.current_time() + config.sys_summary_interval_s
            summary = self._open[peer.connection] = _Summary(peer, due)
            self._start_timer()
        summary.add(task, reply, duration_ms)
        if summary.frames < config.sys_summary_max_frames:
            return None
        del self._open[peer.connection]
        return summary

    async def write(self, summary: _Summary) -> None:
        """Write a summary ``add`` filled; return once it is durable (or folded)."""
        write, counts = _write(summary)
        # Shielded: the frame's reply waits for it, and a frame run in a connection's
        # reader (Dispatcher.try_now) must not lose its reply to a shutdown here.
        with trio.CancelScope(shield=True):
            await self._outbox.put_or_fold(write, counts, owner=summary.peer.connection)

    def close(self, connection: str) -> None:
        """Write ``connection``'s open summary, if any (it has closed)."""
        summary = self._open.pop(connection, None)
        if summary is not None:
            write, counts = _write(summary)
            self._outbox.put_or_fold_nowait(write, counts, owner=connection)

    def flush_all(self) -> None:
        """Write every open summary (at exit)."""
        for connection in list(self._open):
            self.close(connection)

    def _start_timer(self) -> None:
        if not self._timing:
            self._timing = True
            trio.lowlevel.spawn_system_task(
                self._timer, name="csp_web.core.dispatch.sys_audits.timer"
            )

    async def _timer(self) -> None:
        """Write each summary when its interval is over, at most ``TIMER_WRITES_PER_PASS``
        per scheduler pass; ends when none is open."""
        written = 0
        try:
            while self._open:
                connection, summary = next(iter(self._open.items()))
                if trio.current_time() < summary.due:
                    await trio.sleep_until(summary.due)
                    continue
                self.close(connection)
                written += 1
                if written % TIMER_WRITES_PER_PASS == 0:
                    await trio.lowlevel.checkpoint()
        except Exception:  # a system task must not raise: the summaries left go at close
            log.exception("writing an audit summary failed")
        finally:
            self._timing = False


def _write(summary: _Summary) -> tuple[MemoryWrite, Counter[str]]:
    """The summary's write, and the counts it stands for (folded instead when no room)."""
    return make_write("sys", "audit", "audit", summary.record(), suffix=".json"), summary.ops
