"""A connection's replies on their way to the writer: released in request order for frames
without ID (SPEC C-2), queued with the time the oldest waits (the write limit, SPEC L-7)."""

from __future__ import annotations

from collections.abc import Callable

import trio

# What the writer sends in one ``send()``: the replies queued are joined up to this many bytes,
# and a reply past it goes alone, uncopied, so one large reply neither waits for a copy of
# itself nor holds the small ones ahead of it. 64 KiB, as the reader's ``RECEIVE_BYTES``:
# 1,600 pongs per send, a third of a Unix socket's default send buffer (212,992 bytes).
WRITE_BYTES = 65536


class ReplyOrder:
    """Releases replies of frames without ID in request order (SPEC C-2)."""

    def __init__(self) -> None:
        self._next = 0
        self._head = 0
        self._done: dict[int, bytes] = {}

    def reserve(self, task_id: str | None) -> int | None:
        if task_id is not None:
            return None
        self._next += 1
        return self._next - 1

    def complete(self, slot: int | None, data: bytes) -> bytes:
        """The bytes now sendable: ``data`` itself for ID'd frames, else the ready prefix."""
        if slot is None:
            return data
        self._done[slot] = data
        ready = []
        while self._head in self._done:
            ready.append(self._done.pop(self._head))
            self._head += 1
        return b"".join(ready)


class ReplyQueue:
    """Replies waiting for the writer, with the time the oldest was queued (SPEC L-7).

    ``put`` never blocks, so a reply is never lost to a cancellation between being made and
    being queued; back-pressure is a separate ``wait_room`` that the producer awaits after.
    """

    def __init__(self, max_chunks: int) -> None:
        self.max_chunks = max_chunks
        self._chunks: list[bytes] = []
        self._oldest = 0.0  # when the first chunk now queued was queued (take drains them all)
        self._ready = trio.lowlevel.ParkingLot()
        self._room = trio.lowlevel.ParkingLot()
        self._closed = False

    def __len__(self) -> int:
        return len(self._chunks)

    def put(self, data: bytes, *, wake: bool = True) -> None:
        """Queue ``data``; only the first chunk of a batch reads the clock (``take`` drains
        everything queued, so later ones join the same write). ``wake=False`` leaves the
        writer parked: the producer sends what is queued itself before it next waits."""
        if not self._chunks:
            self._oldest = trio.current_time()
        self._chunks.append(data)
        if wake:
            self._ready.unpark_all()

    @property
    def full(self) -> bool:
        """Whether a producer must wait for room (``wait_room``)."""
        return len(self._chunks) >= self.max_chunks

    async def wait_room(self) -> None:
        while self.full:
            await self._room.park()

    def wake(self) -> None:
        """Wake the writer for what is queued (chunks put with ``wake=False`` whose producer
        will not send them itself: the reader has ended)."""
        if self._chunks:
            self._ready.unpark_all()

    def close(self) -> None:
        """No more puts: ``take`` returns None once the queue is empty."""
        self._closed = True
        self._ready.unpark_all()

    async def take(
        self, linger: Callable[[], bool] | None = None
    ) -> tuple[float, list[bytes]] | None:
        """Everything queued as writes (``take_now``), and when its oldest part was queued. When
        ``linger()`` says more replies are coming, wait one scheduler round for them first
        (once: the write limit still runs from the oldest's queueing)."""
        while True:
            while not self._chunks:
                if self._closed:
                    return None
                await self._ready.park()
            if linger is not None and not self._closed and linger():
                await trio.lowlevel.checkpoint()
            if self._chunks:  # else the reader sent them itself meanwhile (``take_now``)
                return self.take_now()

    def take_now(self) -> tuple[float, list[bytes]]:
        """Everything queued, without waiting (the queue must not be empty), in request
        order as the buffers to send: runs of replies joined up to ``WRITE_BYTES``, each
        reply past it on its own; and when the oldest was queued."""
        writes = _joined(self._chunks)
        self._chunks = []
        if self._room:
            self._room.unpark_all()
        return self._oldest, writes


def _joined(chunks: list[bytes]) -> list[bytes]:
    if len(chunks) == 1:
        return chunks
    writes: list[bytes] = []
    run: list[bytes] = []
    size = 0
    for chunk in chunks:
        if run and size + len(chunk) > WRITE_BYTES:
            writes.append(b"".join(run))
            run, size = [], 0
        run.append(chunk)
        size += len(chunk)
    writes.append(b"".join(run))
    return writes
