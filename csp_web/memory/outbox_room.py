"""Room in the outbox (SPEC O-1..O-4): what is pending, each peer's share, folded records.

``OutboxRoom`` counts the writes and bytes pending and which peer each belongs to; an op that
will log waits for room (back-pressure) while a Memory Specialist drains the outbox, and is
refused with ``outbox_full`` when nothing does. Audit records of IN:SYS ops and of refused
frames never wait: past ``max_pending`` they are folded into counts, written as one summary
record once there is room again (or at close).

Delivery shares the event loop with the ops that write: a flood of them would take nearly
every turn of the loop, and writes would pile up unsent (up to ``max_pending``) while the
Memory Specialist idles. So while delivery is *behind* (connected, and a whole window of
writes, ``delivery_window`` x ``batch_size``, waits unsent) an op that will log takes a turn
first (SPEC O-5): one of the admissions that settled writes grant, one per write, or it waits
(FIFO) for the next batch to settle. Ops are then admitted at the rate writes are delivered,
and the backlog stays where it was when delivery fell behind.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping

import trio

from csp_web.config import OutboxConfig
from csp_web.core.api.errors import OpError, StorageFull
from csp_web.core.api.records import MemoryWrite, json_record, make_write
from protocol import ErrorCode

log = logging.getLogger(__name__)
_MAX_FOLDED_KEYS = 256
_REFUSALS_LOGGED_EVERY_S = 10.0  # a full outbox may refuse thousands of writes a second


def write_size(write: MemoryWrite) -> int:
    """The bytes ``write`` counts for against ``max_bytes`` and a peer's share."""
    return len(write.data) + len(write.path)


class OutboxRoom:
    """Pending writes counted against the outbox's limits and each peer's share."""

    def __init__(self, config: OutboxConfig, depth: int, bytes_: int, *, turn_at: int) -> None:
        self._config = config
        self.depth = depth
        self.in_flight = 0  # writes sent to the Memory Specialist and not yet settled
        self._turn_at = turn_at  # writes unsent at which delivery is behind (SPEC O-5)
        self._turns = trio.lowlevel.ParkingLot()  # ops waiting for a turn, FIFO
        self._granted = 0  # admissions granted by settled writes and not yet taken
        self.bytes = bytes_
        self.refused = 0
        self.folded = 0
        self.connected = False  # whether delivery is connected, so waiting makes room
        self.storage_full = False  # the last commit found the disk full (until one succeeds)
        self.drained = trio.Event()  # set while nothing is pending
        if depth == 0:
            self.drained.set()
        self._changed = trio.Event()  # set (and replaced) when room is freed or delivery connects
        self._owners: dict[str, list[int]] = {}  # peer -> [writes, bytes] pending
        self._owner_of: dict[str, str] = {}  # write ID -> peer, for writes of this run
        self._folded: Counter[str] = Counter()
        self._folded_since = 0.0
        self._refusal_logged_at: float | None = None

    @property
    def full(self) -> bool:
        """Whether new ops must wait for room (SPEC O-1)."""
        return self.depth >= self._config.max_pending or self.bytes >= self._config.max_bytes

    def peer_full(self, owner: str) -> bool:
        """Whether ``owner`` holds its whole share of pending writes (SPEC O-2)."""
        held = self._owners.get(owner)
        return held is not None and (
            held[0] >= self._config.max_pending_per_peer
            or held[1] >= self._config.max_bytes_per_peer
        )

    @property
    def behind(self) -> bool:
        """Whether delivery is connected and a whole window of writes waits unsent (O-5)."""
        return self.connected and self.depth - self.in_flight >= self._turn_at

    @property
    def waiting_turns(self) -> int:
        """Ops waiting for a turn (SPEC O-5)."""
        return len(self._turns)

    async def wait_turn(self) -> None:
        """While delivery is behind, take one admission granted by a settled write, or wait
        (FIFO) for the next batch to settle (SPEC O-5); at once otherwise."""
        if not self.behind:
            return
        if self._granted:
            self._granted -= 1
            return
        await self._turns.park()

    def grant(self, settled: int) -> None:
        """``settled`` writes left the outbox: as many ops waiting for a turn may start, or
        all of them once delivery is no longer behind."""
        if not self.behind:
            self._granted = 0
            self._turns.unpark_all()
            return
        woken = len(self._turns.unpark(count=settled))
        self._granted = min(self._granted + settled - woken, self._turn_at)

    async def wait_room(self, owner: str) -> None:
        """Return once an op of ``owner`` may start (after its turn, SPEC O-5);
        OpError(outbox_full) when nothing drains."""
        await self.wait_turn()
        if not await self.wait_paced(owner):
            self.refused += 1
            which = "outbox" if self.full else "this peer's share of the outbox"
            raise OpError(ErrorCode.OUTBOX_FULL, f"{which} is full and not draining")

    async def wait_paced(self, owner: str) -> bool:
        """Wait while full (or ``owner``'s share is) and draining; False when nothing drains."""
        while self.full or self.peer_full(owner):
            if not self.connected:
                return False
            await self._changed.wait()
        return True

    async def wait_changed(self) -> None:
        """Return at the next freeing of room or change of connection."""
        await self._changed.wait()

    def wake(self) -> None:
        """Let waiters re-check: room was freed, or delivery (dis)connected."""
        self._changed.set()
        self._changed = trio.Event()

    def set_connected(self, connected: bool) -> None:
        self.connected = connected
        if not connected:  # nothing to take turns with: room alone decides (O-1)
            self.grant(0)
        self.wake()  # waiters re-check: refused at once while nothing drains

    def set_storage_full(self, full: bool) -> None:
        """Note whether the outbox's disk is full; once space returns, write the summary of
        what was folded meanwhile at the next settle (``take_folded``)."""
        self.storage_full = full

    def refuse_storage_full(self) -> StorageFull:
        """Count a refusal for want of disk space (an op that would log)."""
        self.refused += 1
        return StorageFull("outbox")

    def admit(self, write: MemoryWrite, size: int, *, use_reserve: bool) -> None:
        """Raise OpError(outbox_full) unless ``write`` fits below the hard cap."""
        hard_cap = self._config.max_pending + (self._config.reserve if use_reserve else 0)
        if self.depth >= hard_cap or self.bytes + size > self._config.max_bytes:
            self.refused += 1
            self._log_refusal(write.id)
            raise OpError(ErrorCode.OUTBOX_FULL, f"{self.depth} writes pending")

    def _log_refusal(self, write_id: str) -> None:
        """One warning per ``_REFUSALS_LOGGED_EVERY_S`` at most, with the running count (stats
        show it too): a line per refused write would flood the log under the very load that
        fills the outbox."""
        now = time.monotonic()
        last = self._refusal_logged_at
        if last is None or now - last >= _REFUSALS_LOGGED_EVERY_S:
            self._refusal_logged_at = now
            log.warning(
                "outbox full: refused write %s (%s pending; %s refused since start)",
                write_id,
                self.depth,
                self.refused,
            )

    def add(self, write: MemoryWrite, size: int, owner: str | None) -> None:
        """Count ``write`` as pending (against ``owner``'s share when given)."""
        self.depth += 1
        self.bytes += size
        if owner is not None:
            held = self._owners.setdefault(owner, [0, 0])
            held[0] += 1
            held[1] += size
            self._owner_of[write.id] = owner
        if self.drained.is_set():
            self.drained = trio.Event()

    def remove(self, writes: list[MemoryWrite]) -> None:
        """Stop counting ``writes`` (settled, or never stored) and their owners' shares."""
        for write in writes:
            size = write_size(write)
            self.bytes -= size
            owner = self._owner_of.pop(write.id, None)
            if owner is not None:
                held = self._owners[owner]
                held[0] -= 1
                held[1] -= size
                if held[0] == 0:
                    del self._owners[owner]
        self.depth -= len(writes)
        if self.depth == 0:
            self.drained.set()

    def fold(self, key: str | Mapping[str, int], size: int) -> bool:
        """Count ``key`` in the folded summary when the outbox has no room; False if it has."""
        if not (self.storage_full or self.full or self.bytes + size > self._config.max_bytes):
            return False
        self.count_folded(key)
        return True

    def count_folded(self, key: str | Mapping[str, int]) -> None:
        """Count ``key`` in the folded summary (a write that cannot be stored now)."""
        if not self._folded:
            self._folded_since = time.time()
            why = "disk" if self.storage_full else "outbox"
            log.warning("%s full: folding audit records of sys ops and refused frames", why)
        for name, count in ({key: 1} if isinstance(key, str) else key).items():
            if name not in self._folded and len(self._folded) >= _MAX_FOLDED_KEYS:
                name = "other"  # REQ names are the caller's: keep the summary bounded
            self._folded[name] += count
            self.folded += count

    def take_folded(self) -> MemoryWrite | None:
        """The summary of folded audit records as one write (None if there are none); the
        counts start again."""
        if not self._folded:
            return None
        record = json_record(
            folded=dict(sorted(self._folded.items())),
            since=self._folded_since,
            until=time.time(),
            total=sum(self._folded.values()),
        )
        self._folded.clear()
        return make_write("sys", "audit", "audit", record, suffix=".json")
