"""Who is paired: the node store (tokens hashed, 0600 in a 0700 folder), pending pairing codes
(short, expiring, single use) and the attempt limiter (N-4 to N-6).

Tokens are 32 random bytes: a plain SHA-256 of one cannot be reversed or guessed, so a slow
password hash would add nothing (as GitHub stores its tokens). The file is rewritten whole
through a temporary file and ``os.replace``, so a crash leaves the old or the new store.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import secrets
import time
from collections import deque
from dataclasses import asdict, dataclass, field

from csp_web.core.api.errors import StorageFull
from csp_web.core.api.storage import storage_seam

from .wire import Hello

log = logging.getLogger(__name__)

STORE_FILE = "nodes.json"
# Crockford's base32 without I, L, O, U: codes are read aloud and typed by an operator.
_CODE_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
CODE_CHARS = 8  # 40 bits: with 5 attempts a minute a guess takes ~10^11 minutes


class AlreadyPaired(ValueError):
    """A pairing for a name the store already holds (paired meanwhile, maybe by a peer)."""


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


def new_code() -> str:
    raw = "".join(secrets.choice(_CODE_ALPHABET) for _ in range(CODE_CHARS))
    return f"{raw[:4]}-{raw[4:]}"


def normal_code(code: str) -> str:
    """An operator's typing of a code in its stored spelling (case and dash forgiven)."""
    raw = code.strip().upper().replace("-", "")
    return f"{raw[:4]}-{raw[4:]}"


@dataclass
class NodeRecord:
    """One paired node as the store keeps it; ``last_seen`` is a Unix time."""

    name: str
    platform: str
    capabilities: list[str]
    token_sha256: str
    paired_at: float
    last_seen: float | None = None


class NodeStore:
    """The paired nodes, persisted at ``<directory>/nodes.json``. Raises OSError when the
    folder cannot be made private and ValueError when the file is not a store."""

    def __init__(self, directory: str, *, max_nodes: int) -> None:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)
        self.path = os.path.join(directory, STORE_FILE)
        self.max_nodes = max_nodes
        self.nodes: dict[str, NodeRecord] = {}
        self.storage_full = False  # the last save found the disk full (SPEC O-6)
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as file:
                data = json.load(file)
            if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
                raise ValueError(f"{self.path}: not a node store")
            for entry in data["nodes"]:
                record = NodeRecord(**entry)
                self.nodes[record.name] = record

    def check_token(self, name: str, token: str) -> NodeRecord | None:
        """The record of ``name`` when ``token`` is its token, else None (constant time)."""
        record = self.nodes.get(name)
        digest = hash_token(token)
        if record is None or not hmac.compare_digest(record.token_sha256, digest):
            return None
        return record

    def add(self, hello: Hello) -> str:
        """Pair ``hello``'s node; returns its new token (shown once, stored hashed)."""
        if len(self.nodes) >= self.max_nodes and hello.name not in self.nodes:
            raise ValueError(f"the store holds {self.max_nodes} nodes (nodes.max_nodes)")
        token = new_token()
        before = self.nodes.get(hello.name)
        self.nodes[hello.name] = NodeRecord(
            hello.name, hello.platform, list(hello.capabilities), hash_token(token), time.time()
        )
        try:
            self.save()
        except StorageFull:  # not paired: what is held must stay what the file says
            self._restore(hello.name, before)
            raise
        return token

    def remove(self, name: str) -> bool:
        """Unpair ``name``; False when it is not paired. Raises StorageFull("state")."""
        before = self.nodes.pop(name, None)
        if before is None:
            return False
        try:
            self.save()
        except StorageFull:
            self._restore(name, before)
            raise
        return True

    def _restore(self, name: str, record: NodeRecord | None) -> None:
        if record is None:
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = record

    def seen(self, record: NodeRecord, hello: Hello) -> None:
        """Note a node's hello: what it offers now and when (saved with the next change)."""
        record.platform = hello.platform
        record.capabilities = list(hello.capabilities)
        record.last_seen = time.time()
        self.save_soon()

    # The hub's interface, shared with ``shared.SharedNodeStore`` (redis.url), whose calls
    # go to Redis; here they are the file's.

    async def lookup(self, name: str) -> NodeRecord | None:
        """The record of ``name`` as stored now, or None."""
        return self.nodes.get(name)

    async def pair(self, hello: Hello) -> str:
        """``add``: raises ValueError when the store is full or ``hello``'s name is paired."""
        if hello.name in self.nodes:
            raise AlreadyPaired(hello.name)
        return self.add(hello)

    async def forget(self, name: str) -> bool:
        return self.remove(name)

    async def greet(self, record: NodeRecord, hello: Hello) -> None:
        self.seen(record, hello)

    async def refresh(self) -> None:
        """Take the other daemons' changes (none: the file is this daemon's alone)."""

    def left(self, name: str) -> None:
        """Note that ``name``'s link ended now (its ``last_seen``)."""
        record = self.nodes.get(name)
        if record is not None:
            record.last_seen = time.time()
            self.save_soon()

    def save_soon(self) -> None:
        """``save`` a change nothing waits on (when a node was last seen): on a full disk it
        is kept in memory and written with the next save."""
        try:
            self.save()
        except StorageFull:
            log.warning("nodes: disk full, last-seen times not saved yet")

    def save(self) -> None:
        """Write the store whole (a temporary file renamed over it). Raises
        StorageFull("state") when the disk is full, the file left as it was."""
        data = {"nodes": [asdict(r) for r in sorted(self.nodes.values(), key=lambda r: r.name)]}
        temporary = f"{self.path}.{os.getpid()}.tmp"
        try:
            with storage_seam("state"):
                fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
                with os.fdopen(fd, "w", encoding="utf-8") as file:
                    json.dump(data, file, indent=1)
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(temporary, self.path)
        except StorageFull:
            self.storage_full = True
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
        self.storage_full = False


@dataclass
class PendingPair:
    """A pair request waiting for an operator: its code, who asked, until when (monotonic)."""

    code: str
    hello: Hello
    source: str
    expires_at: float
    approved: str | None = None  # the token, once approved (handed to the waiting link)


class AttemptLimiter:
    """At most ``attempts`` events per ``source`` in any ``window_s`` (a sliding log)."""

    def __init__(self, attempts: int, window_s: float) -> None:
        self.attempts = attempts
        self.window_s = window_s
        self._log: dict[str, deque[float]] = {}

    def allow(self, source: str, now: float) -> bool:
        """Count one attempt by ``source`` at ``now``; False (not counted) past the limit."""
        log = self._log.setdefault(source, deque())
        while log and log[0] <= now - self.window_s:
            log.popleft()
        if len(log) >= self.attempts:
            return False
        log.append(now)
        if len(self._log) > 4096:  # forget sources whose window has passed
            self._log = {k: v for k, v in self._log.items() if v and v[-1] > now - self.window_s}
        return True


class PairsFull(Exception):
    """A pair request past a cap; the message names which one."""


@dataclass
class PendingPairs:
    """Codes waiting for approval; expired ones are dropped when looked at. A code lives
    ``ttl_s`` from its request, whatever its link sends meanwhile."""

    ttl_s: float
    max_pending: int
    # One source may hold only a few codes, so that one source pacing its requests under the
    # attempt limit cannot keep every slot taken and lock other nodes out (issue 22).
    max_per_source: int = 2
    pairs: dict[str, PendingPair] = field(default_factory=dict)

    def add(self, hello: Hello, source: str, now: float) -> PendingPair:
        """A new pending pair; raises PairsFull when ``source`` already has
        ``max_per_source`` waiting, or ``max_pending`` wait in all."""
        self.expire(now)
        mine = sum(1 for pair in self.pairs.values() if pair.source == source)
        if mine >= self.max_per_source:
            raise PairsFull(f"{mine} pairings from this source wait for approval")
        if len(self.pairs) >= self.max_pending:
            raise PairsFull("too many pairings wait for approval")
        code = new_code()
        while code in self.pairs:
            code = new_code()
        pair = PendingPair(code, hello, source, now + self.ttl_s)
        self.pairs[code] = pair
        return pair

    def waiting(self, now: float) -> list[PendingPair]:
        """The live pairs, soonest to expire first."""
        self.expire(now)
        return sorted(self.pairs.values(), key=lambda pair: pair.expires_at)

    def take(self, code: str, now: float) -> PendingPair | None:
        """The live pair with ``code``, removed (single use), or None."""
        self.expire(now)
        return self.pairs.pop(normal_code(code), None)

    def drop(self, pair: PendingPair) -> None:
        if self.pairs.get(pair.code) is pair:
            del self.pairs[pair.code]

    def expire(self, now: float) -> None:
        for code in [c for c, p in self.pairs.items() if p.expires_at <= now]:
            del self.pairs[code]
