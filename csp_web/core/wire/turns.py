"""Daemon-wide fair admission of frame starts (SPEC L-10): every connection gets its turn.

Trio runs every runnable task once per scheduler round, so a round costs about as much as the
work started in it. Without a bound, 1,000 connections with full pipelines make every round
long, and a fresh client needs several rounds (accept, read, start, write) to get its reply.
So each frame start is admitted here first:

- at most ``frames_per_round`` frames start per scheduler round, daemon-wide;
- under contention starts are granted in virtual rounds, one frame per connection per round,
  round-robin (start-time fair queuing, as in Linux's CFQ and Goyal et al. 1996);
- a connection that started nothing in the previous round (a new or an idle one) goes to the
  front: its first frame starts in the next scheduler round however many others wait; an
  instant one that nobody is ahead of starts at once, on the next round's budget (waiting
  for the pump to grant it cost a fresh ping two scheduler rounds behind 1,000 busy
  connections: bench/fairness.py --only busy).

An instant frame (an op that never waits: ping, stats, ops) takes its turn like any other
but never counts toward ``max_running``, so slow ops that fill it cannot hold a ping back: a
full daemon still answers its cheapest questions (issue 21: 64 pipelined ``exec sleep 15``
made 50 pings behind them wait 16 s).

Without contention a start costs no checkpoint: the budget is only refilled, and the waiting
starts granted, by a pump task that runs while anyone waits, and stays while frames keep
starting (one round with no start and nobody waiting ends it).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

import trio


@dataclass
class Seat:
    """One connection's place in the rounds: the round its next frame belongs to."""

    next_round: int = -1  # -1 < round 0: a new connection goes to the front


@dataclass(order=True)
class _Ticket:
    key: tuple[int, int]  # (virtual round, arrival): the order grants are made in
    seat: Seat = field(compare=False)
    instant: bool = field(compare=False, default=False)  # needs no running place
    granted: trio.Event = field(compare=False, default_factory=trio.Event)
    abandoned: bool = field(compare=False, default=False)


class FairStarts:
    """Grants frame starts to connections fairly; one instance serves a daemon's connections."""

    def __init__(self, frames_per_round: int, max_running: int) -> None:
        self.frames_per_round = frames_per_round
        self.max_running = max_running
        self.running = 0  # frames started and not yet done (instant ones never count)
        self.round = 0  # the virtual round being granted
        self.rounds = 0  # scheduler rounds in which the pump granted (observability, tests)
        self._budget = frames_per_round
        self._waiting: list[_Ticket] = []  # starts that need a running place
        self._instant: list[_Ticket] = []  # starts that need only their turn
        self._arrivals = itertools.count()
        self._pumping = False

    @property
    def waiting(self) -> int:
        return len(self._waiting) + len(self._instant)

    def must_wait(self, *, instant: bool = False) -> bool:
        """Whether ``wait_start`` would wait now (it returns at once otherwise)."""
        return bool(self.waiting) or self._budget <= 0 or not (instant or self._has_room())

    def waits_long(self, *, instant: bool = False) -> bool:
        """Whether ``wait_start`` would wait past the pump's next round: others wait for
        their turns, or (not ``instant``) every running place is taken. False while only
        this round's budget is spent: the start comes in the next round."""
        return bool(self.waiting) or not (instant or self._has_room())

    def _round_of(self, seat: Seat) -> int:
        if seat.next_round < self.round:  # nothing started last round: new or idle
            return self.round - 1
        return min(seat.next_round, self.round + 1)  # never more than one round behind

    async def wait_start(self, seat: Seat, *, instant: bool = False) -> None:
        """Return when ``seat``'s connection may start its next frame.

        Returns at once (no checkpoint) while nobody waits and this round's budget lasts.
        An ``instant`` start needs no running place and is not followed by ``done``.
        Cancellation before the grant gives the place up and starts nothing."""
        if self.start_now(seat, instant=instant):
            return
        key = self._round_of(seat)
        ticket = _Ticket((key, next(self._arrivals)), seat, instant)
        heapq.heappush(self._instant if instant else self._waiting, ticket)
        self._wake_pump()
        try:
            await ticket.granted.wait()
        except BaseException:
            ticket.abandoned = True  # the pump skips it; nothing was granted (Event semantics)
            raise

    def start_now(self, seat: Seat, *, instant: bool = False) -> bool:
        """Start ``seat``'s next frame now if ``wait_start`` would not wait: True when
        started. A plain call, no coroutine: a pipelining reader asks once per frame."""
        key = self._round_of(seat)
        if self.must_wait(instant=instant) and not (instant and self._first_in_line(seat, key)):
            return False
        self._budget -= 1  # a newcomer's may run into the next round's (``_refill``)
        self.running += not instant
        seat.next_round = key + 1
        return True

    def _first_in_line(self, seat: Seat, key: int) -> bool:
        """Whether ``seat`` is a new or idle connection's that the pump would grant before
        every start now waiting, with at most one round's budget borrowed: a flood of new
        connections takes no more than the queue would give them."""
        if seat.next_round >= self.round or self._budget <= -self.frames_per_round:
            return False
        return all(not heap or key < heap[0].key[0] for heap in (self._waiting, self._instant))

    def _refill(self) -> None:
        """A new scheduler round's budget, less what newcomers took ahead of it."""
        self._budget = min(self._budget, 0) + self.frames_per_round

    def done(self) -> None:
        """A frame admitted by ``wait_start`` has finished (its reply is queued)."""
        self.running -= 1
        self._wake_pump()

    def _has_room(self) -> bool:
        return self.running < self.max_running

    def _grantable(self) -> bool:
        """Whether a waiting start could be granted now, budget aside."""
        return bool(self._instant) or (bool(self._waiting) and self._has_room())

    def _wake_pump(self) -> None:
        if not self._pumping and self._grantable():
            self._pumping = True
            trio.lowlevel.spawn_system_task(self._pump, name="csp_web.core.wire.turns.pump")

    def _next_ticket(self) -> _Ticket:
        """The earliest grantable ticket (``_grantable`` must hold): instant ones compete
        with the others in round order, and skip them only when no running place is free."""
        if not self._instant or (
            self._waiting and self._has_room() and self._waiting[0] < self._instant[0]
        ):
            return heapq.heappop(self._waiting)
        return heapq.heappop(self._instant)

    async def _pump(self) -> None:
        """Each scheduler round: refill the budget and grant the first waiting starts.
        Stops when nothing waiting can be granted (``done`` starts it again once a running
        place frees) or after a round in which nobody waited and nothing started. While frames
        start without waiting it stays (refilling, granting nothing): a pipelining reader that
        spends the budget is granted in the pump's next run, with no task spawned per budget's
        worth of frames."""
        try:
            while self._grantable() or not self.waiting:
                if not self.waiting:
                    if self._budget == self.frames_per_round:
                        return  # a round with no start and nobody waiting: idle
                    self._refill()
                    await trio.lowlevel.checkpoint()
                    continue
                self._refill()
                while self._budget > 0 and self._grantable():
                    self._grant(self._next_ticket())
                self.rounds += 1
                await trio.lowlevel.checkpoint()  # the granted tasks run in the next round
        finally:
            self._pumping = False

    def _grant(self, ticket: _Ticket) -> None:
        if ticket.abandoned:
            return
        key = ticket.key[0]
        self.round = max(self.round, key)
        ticket.seat.next_round = key + 1
        self._budget -= 1
        self.running += not ticket.instant
        ticket.granted.set()
