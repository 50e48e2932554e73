"""The announcement board (seed 004): recent fetches with their fileKeys, titles, URLs and
sizes, never their content, so an agent sees what it already has.

A **turn** is one task of a document op (``search``, ``fetch``, ``board``, ``save``,
``cabinet``, ``write_file``, ``research``, ``result``) from the same peer: the same uid over
the Unix socket, or the one stdin connection. An entry announced in turn ``t`` is listed in
turns ``t`` to ``t + ttl_turns - 1`` (seed 004's "TTL: 5 turns"); fetching it again announces it
afresh. Each peer holds at most ``max_entries`` (the oldest go first); peers not seen for a
while are forgotten past ``MAX_PEERS``. The board lives in the daemon's memory only.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field

from csp_web.core.api.context import Peer
from protocol import Field
from specialists.web.docs.config import BoardConfig

MAX_PEERS = 1024  # one board per uid; a daemon serves a handful


@dataclass(frozen=True)
class Entry:
    """One announced snapshot: ``chars`` and ``tokens`` measure its whole content."""

    file_key: str
    url: str
    title: str | None
    chars: int
    tokens: int
    turn: int


@dataclass
class _PeerBoard:
    turn: int = 0
    entries: OrderedDict[str, Entry] = field(default_factory=OrderedDict)


class Board:
    """Every peer's board; turns and entries per ``owner(peer)``."""

    def __init__(self) -> None:
        self._peers: OrderedDict[str, _PeerBoard] = OrderedDict()

    def turn(self, peer: Peer, config: BoardConfig) -> int:
        """Start the peer's next turn and return its number (the first is 1); entries out of
        their TTL are dropped."""
        board = self._board(peer)
        board.turn += 1
        for key in [k for k, e in board.entries.items() if _left(e, board, config) <= 0]:
            del board.entries[key]
        return board.turn

    def current(self, peer: Peer) -> int:
        """The peer's turn now (0 before its first)."""
        return self._board(peer).turn

    def announce(self, peer: Peer, entry: Entry, config: BoardConfig) -> None:
        """Put ``entry`` on the peer's board (replacing an older one of the same key)."""
        board = self._board(peer)
        board.entries.pop(entry.file_key, None)
        board.entries[entry.file_key] = entry
        while len(board.entries) > config.max_entries:
            board.entries.popitem(last=False)

    def listing(self, peer: Peer, config: BoardConfig) -> list[tuple[Entry, int]]:
        """The peer's live entries, newest first, each with the turns it has left."""
        board = self._board(peer)
        live = [(e, _left(e, board, config)) for e in reversed(board.entries.values())]
        return [(entry, left) for entry, left in live if left > 0]

    def _board(self, peer: Peer) -> _PeerBoard:
        name = owner(peer)
        board = self._peers.pop(name, None) or _PeerBoard()
        self._peers[name] = board
        while len(self._peers) > MAX_PEERS:
            self._peers.popitem(last=False)
        return board


def _left(entry: Entry, board: _PeerBoard, config: BoardConfig) -> int:
    return entry.turn + config.ttl_turns - board.turn


def owner(peer: Peer) -> str:
    """Whose board a task uses: its uid on the socket, else its connection (stdin)."""
    return f"uid:{peer.uid}" if peer.uid is not None else f"connection:{peer.connection}"


def file_lines(listing: list[tuple[Entry, int]]) -> list[Field]:
    """``FILE <fileKey> <url> chars:<n> tokens:<n> turns_left:<n> "<title>"`` per entry."""
    return [
        (
            "FILE",
            f"{entry.file_key} {entry.url} chars:{entry.chars} tokens:{entry.tokens} "
            f"turns_left:{left} {json.dumps(entry.title or '', ensure_ascii=False)}",
        )
        for entry, left in listing
    ]
