"""The paired-node store shared by a fleet (``redis.url``): one Redis hash, ``p nodes:paired``
(a field per node, its record as JSON, the token only as its SHA-256), so a node paired
through one daemon is known to all, and a revoke anywhere holds everywhere.

Each daemon keeps the hash's last answer as ``nodes`` (a mirror): every lookup asks Redis
first and falls back to the mirror while Redis is unavailable, so a node connected to this
daemon keeps working (counted as ``node_store_cached`` in the ``REDIS`` stats line). A change
(pair, revoke) needs Redis: without it the operator's act fails ``not_available``. A revoke
also publishes a ``node_revoke`` event; the daemon holding the node's link cuts it (N-13).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from typing import Any

from csp_web.core.api.errors import OpError
from csp_web.infra.redis_link import RedisLink, RedisUnavailable
from protocol import ErrorCode

from .store import AlreadyPaired, NodeRecord, NodeStore, hash_token, new_token
from .wire import Hello

log = logging.getLogger(__name__)

# Add a node unless its name is paired (0) or the store is full (-1).
_PAIR = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""

# Update a record only while its node is paired (a revoke elsewhere wins over a late hello).
_UPDATE = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""

_FORGET = """
local gone = redis.call('HDEL', KEYS[1], ARGV[1])
if gone == 1 then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
return gone
"""


def _record(text: str | bytes) -> NodeRecord:
    return NodeRecord(**json.loads(text))


def _text(record: NodeRecord) -> str:
    return json.dumps(asdict(record), sort_keys=True)


class SharedNodeStore(NodeStore):
    """``NodeStore``'s hub interface over the fleet's hash; ``nodes`` is the mirror."""

    def __init__(self, link: RedisLink, *, max_nodes: int) -> None:  # no file, no folder
        self._link = link
        self.path = link.key("nodes", "paired")  # named in errors, like the file's path
        self.max_nodes = max_nodes
        self.storage_full = False  # Redis holds it: no disk of this daemon's
        self.nodes: dict[str, NodeRecord] = {}
        self._pair = link.client.register_script(_PAIR)
        self._update = link.client.register_script(_UPDATE)
        self._forget = link.client.register_script(_FORGET)

    async def refresh(self) -> None:
        """Take the hash whole into the mirror (kept as it was while Redis is unavailable)."""

        def load(r: Any) -> dict[bytes, bytes]:
            return dict(r.hgetall(self.path))

        try:
            stored = await self._link.call(load, "nodes_load")
        except RedisUnavailable:
            self._link.fallback("node_store_cached")
            return
        self.nodes = {k.decode(): _record(v) for k, v in stored.items()}

    async def lookup(self, name: str) -> NodeRecord | None:
        try:
            raw = await self._link.call(lambda r: r.hget(self.path, name), "nodes_get")
        except RedisUnavailable:
            self._link.fallback("node_store_cached")
            return self.nodes.get(name)
        if raw is None:
            self.nodes.pop(name, None)
            return None
        record = self.nodes[name] = _record(raw)
        return record

    async def pair(self, hello: Hello) -> str:
        token = new_token()
        record = NodeRecord(
            hello.name, hello.platform, list(hello.capabilities), hash_token(token), time.time()
        )
        args: list[str | int] = [hello.name, _text(record), self.max_nodes]
        added = await self._change(lambda r: self._pair(keys=[self.path], args=args, client=r))
        if added == 0:
            raise AlreadyPaired(hello.name)
        if added == -1:
            raise ValueError(f"the store holds {self.max_nodes} nodes (nodes.max_nodes)")
        self.nodes[hello.name] = record
        return token

    async def forget(self, name: str) -> bool:
        event = self._link.event("node_revoke", name=name)
        args = [name, self._link.channel, event]
        gone = await self._change(lambda r: self._forget(keys=[self.path], args=args, client=r))
        self.nodes.pop(name, None)
        return bool(gone)

    async def greet(self, record: NodeRecord, hello: Hello) -> None:
        """Note a hello (platform, capabilities, when); skipped while Redis is unavailable."""
        record.platform = hello.platform
        record.capabilities = list(hello.capabilities)
        record.last_seen = time.time()
        await self._write_quietly(record)

    def left(self, name: str) -> None:
        """The mirror's ``last_seen``; the fleet's registrar writes it (``fleet.py``)."""
        record = self.nodes.get(name)
        if record is not None:
            record.last_seen = time.time()

    async def write_seen(self, name: str) -> None:
        record = self.nodes.get(name)
        if record is not None:
            await self._write_quietly(record)

    async def _write_quietly(self, record: NodeRecord) -> None:
        args = [record.name, _text(record)]
        try:
            await self._link.call(
                lambda r: self._update(keys=[self.path], args=args, client=r), "nodes_seen"
            )
        except RedisUnavailable:
            self._link.fallback("node_seen_skip")

    async def _change(self, script: Any) -> Any:
        try:
            return await self._link.call(script, "nodes_change")
        except RedisUnavailable:
            detail = "the fleet's node store is unavailable (redis)"
            raise OpError(ErrorCode.NOT_AVAILABLE, detail, scope=("node",)) from None

    def save(self) -> None:
        """Nothing to write: every change went to Redis when it was made."""
