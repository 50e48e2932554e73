"""Cancelling unfinished tasks (SPEC C-6): by ``REQ:cancel TARGET <id>`` for the uid that
sent them, on any of its connections, and every task of a connection whose peer hung up.

A ``Ticket`` stands for one task a connection received, from its frame until its work ends;
the dispatcher binds it to the task's cancel scope and closes it the moment the work ends.
Cancelling marks the ticket and cancels the scope; the dispatcher then answers
``FAIL cancelled`` whatever the work did meanwhile, so a cancel's count is exactly the tasks
that answer so, and a task whose work ended before the cancel is not counted. Tasks that are
not a connection's (cron runs) get no ticket; a research job's background work is not its
task's, so it outlives both.
"""

from __future__ import annotations

from typing import TypeVar

import trio

from csp_web.core.api.context import Peer

K = TypeVar("K")

BY_REQUEST = "by REQ:cancel"  # the detail of ``cancelled`` for each cause
BY_HANGUP = "the client hung up"


class Ticket:
    """One unfinished task of ``uid`` with the client's ID ``task_id`` (None: no ID, so only
    its connection's hang-up can cancel it). ``reason`` is None until it is cancelled."""

    __slots__ = ("_cancels", "connection", "key", "reason", "scope")

    def __init__(self, cancels: Cancels, key: tuple[int | None, str] | None, connection: str):
        self._cancels = cancels
        self.key = key
        self.connection = connection
        self.reason: str | None = None
        self.scope: trio.CancelScope | None = None

    @property
    def cancelled(self) -> bool:
        return self.reason is not None

    def bind(self, scope: trio.CancelScope) -> None:
        """``scope`` runs the task's work: a cancel from now on cancels it (at once, when
        the task was cancelled before its work began)."""
        self.scope = scope
        if self.reason is not None:
            scope.cancel()

    def cancel(self, reason: str) -> None:
        """Cancel the task; one cancelled already keeps its first reason."""
        if self.reason is None:
            self.reason = reason
        if self.scope is not None:
            self.scope.cancel()

    def close(self) -> None:
        """The work has ended (or never will): no later cancel counts this task. Idempotent."""
        self._cancels._drop(self)


class Cancels:
    """Every open ticket, by (uid, ID) and by connection; and the connections whose peer
    hung up, until they close."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[int | None, str], set[Ticket]] = {}
        self._by_connection: dict[str, set[Ticket]] = {}
        self._hung_up: set[str] = set()

    def open(self, peer: Peer, task_id: str | None) -> Ticket:
        """A ticket for a task ``peer`` sent; the caller closes it (``Ticket.close``). On a
        connection whose peer hung up it is cancelled already: the frame was sent before."""
        key = (peer.uid, task_id) if task_id is not None else None
        ticket = Ticket(self, key, peer.connection)
        if peer.connection in self._hung_up:
            ticket.cancel(BY_HANGUP)
        if key is not None:
            self._by_key.setdefault(key, set()).add(ticket)
        self._by_connection.setdefault(peer.connection, set()).add(ticket)
        return ticket

    def cancel(self, uid: int | None, task_id: str) -> int:
        """Cancel every unfinished task of ``uid`` with ID ``task_id``; how many there were.
        Another uid's tasks are never touched (nor counted)."""
        return _cancel_all(self._by_key.get((uid, task_id), ()), BY_REQUEST)

    def cancel_connection(self, connection: str) -> int:
        """Cancel every unfinished task of ``connection`` (its peer hung up), and every one
        opened on it later, until ``forget``; how many were unfinished."""
        self._hung_up.add(connection)
        return _cancel_all(self._by_connection.get(connection, ()), BY_HANGUP)

    def forget(self, connection: str) -> None:
        """``connection`` has closed: its name may serve another one."""
        self._hung_up.discard(connection)

    def _drop(self, ticket: Ticket) -> None:
        _discard(self._by_connection, ticket.connection, ticket)
        if ticket.key is not None:
            _discard(self._by_key, ticket.key, ticket)


def _cancel_all(tickets: set[Ticket] | tuple[()], reason: str) -> int:
    """Cancel ``tickets``; how many (a task cancelled already but not yet answered counts
    again: it is unfinished, and answers ``cancelled``)."""
    for ticket in tickets:
        ticket.cancel(reason)
    return len(tickets)


def _discard(index: dict[K, set[Ticket]], key: K, ticket: Ticket) -> None:
    tickets = index.get(key)
    if tickets is not None:
        tickets.discard(ticket)
        if not tickets:
            del index[key]
