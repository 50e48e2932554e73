"""Nodes across a fleet (``redis.url``): which daemon holds each node's link, and node tasks
forwarded to it (protocol/NODES.md N-16 to N-18, docs/scaling.md).

Registry: each live link is ``p node:link:<name>`` = ``{"daemon": <id>}`` with a lease
(``redis.node_lease_s``), written when the link goes live (a newer link replaces an older one
anywhere: its daemon cuts it on the ``node_attach`` event, or at its next renewal), renewed
every third of the lease while connected, deleted by its owner when the link ends, and
expiring by itself when the daemon dies.

Forwarding, over the fleet's event channel (``p events``; only daemons sharing the Redis,
its ACL user and prefix, can read or write it): the daemon asked (the *caller*) reads the
holder's id and publishes ``node_task`` ``{to, rid, op, deadline_s, ...}``. The holder takes
it at once (``node_answer`` ``accepted``), runs it through its own checks (the node paired,
its link live, its capability, the media caps and reply schema, ``nodes.max_forwarded_tasks``)
within the caller's deadline, and publishes the answer. Media go through Redis: the holder
pushes the capture in 1 MiB chunks to ``p node:media:<rid>`` (60 s TTL), the caller reads
them, checks size and SHA-256 and saves the file in its own media folder, then deletes the
key, so the path a client gets is on the host that answered it. No ack within
``redis.node_ack_s``: ``node_unavailable``; no answer by the deadline: the task's own
``timeout_exceeded``. Redis or its events down: tasks for links held here run as before,
the others fail ``node_unavailable`` at once.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
from collections.abc import Mapping
from typing import Any, Protocol

import trio

from csp_web.core.api.errors import OpError
from csp_web.infra.redis_link import RedisLink, RedisUnavailable
from protocol import ErrorCode

from .forward_wire import CODES, checked_task, fetch_media, store_media
from .results import Checked
from .shared import SharedNodeStore
from .wire import MediaInfo

log = logging.getLogger(__name__)


# Register links (ARGV[i+3] "1": a new link, taken over whoever held it) or renew them (only
# while this daemon holds them); returns the indexes of the renewals another daemon took.
_LINKS = """
local lost = {}
for i = 1, #KEYS do
  local held = redis.call('GET', KEYS[i])
  local fresh = ARGV[3 + i] == '1'
  if fresh or not held or cjson.decode(held)['daemon'] == ARGV[1] then
    redis.call('SET', KEYS[i], ARGV[2], 'PX', ARGV[3])
  else
    table.insert(lost, i)
  end
end
return lost
"""

_UNLINK = """
for i = 1, #KEYS do
  local held = redis.call('GET', KEYS[i])
  if held and cjson.decode(held)['daemon'] == ARGV[1] then redis.call('DEL', KEYS[i]) end
end
return 1
"""


class FleetHub(Protocol):
    """What the fleet needs of ``hub.NodeHub``: its links, running an action on one of them,
    approving a pairing that waits here, and cutting a link."""

    @property
    def live_names(self) -> list[str]: ...
    async def run_here(
        self, name: str, action: str, params: Mapping[str, Any]
    ) -> tuple[Checked, bytes | None]: ...
    async def approve_here(self, code: str) -> str: ...
    def cut(self, name: str) -> None: ...


class _Forward:
    __slots__ = ("accepted", "answer", "done")

    def __init__(self) -> None:
        self.accepted = trio.Event()
        self.done = trio.Event()
        self.answer: dict[str, Any] = {}


def _unavailable(detail: str) -> OpError:
    return OpError(ErrorCode.NODE_UNAVAILABLE, detail, scope=("node",))


class NodeFleet:
    """The registry and the forwarding of one daemon; ``serve`` is its background task."""

    def __init__(
        self, link: RedisLink, hub: FleetHub, store: SharedNodeStore, *, max_forwarded: int
    ) -> None:
        self.link = link
        self.hub = hub
        self.store = store
        self.max_forwarded = max_forwarded
        self.daemon_id = link.daemon_id
        self._changed = trio.Event()
        self._fresh: set[str] = set()  # links gone live since the last sync
        self._gone: set[str] = set()  # links ended since the last sync
        self._pending: dict[str, _Forward] = {}
        self._nursery: trio.Nursery | None = None
        self._links = link.client.register_script(_LINKS)
        self._unlink = link.client.register_script(_UNLINK)
        self.registered: set[str] = set()
        self.synced = trio.Event()  # set (and replaced) after each registry write
        self.serving = 0
        self.counts = {"forwarded": 0, "served": 0, "forward_refused": 0, "route_failures": 0}
        link.on_event("node_task", self._on_task)
        link.on_event("node_answer", self._on_answer)
        link.on_event("node_attach", self._on_attach)
        link.on_event("node_revoke", self._on_revoke)

    def stats(self) -> str:
        return ",".join(f"{k}:{v}" for k, v in self.counts.items())

    # -- the registry ------------------------------------------------------------------------

    def attached(self, name: str) -> None:
        self._fresh.add(name)
        self._gone.discard(name)
        self._changed.set()

    def detached(self, name: str) -> None:
        self._gone.add(name)
        self._fresh.discard(name)
        self._changed.set()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the registry and serve forwarded tasks until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                while True:
                    self._changed = trio.Event()
                    await self._sync()
                    with trio.move_on_after(self.link.config.node_lease_s / 3):
                        await self._changed.wait()
            finally:
                self._nursery = None

    async def _sync(self) -> None:
        live = self.hub.live_names
        fresh, gone = set(self._fresh), self._gone - set(live)
        await self.store.refresh()  # the mirror, for when Redis is next unavailable (N-18)
        lease_ms = max(1, math.ceil(self.link.config.node_lease_s * 1000))
        value = json.dumps({"daemon": self.daemon_id})
        flags = ["1" if name in fresh else "0" for name in live]
        keys, gone_keys = [self._key(n) for n in live], [self._key(n) for n in gone]
        try:
            lost: list[int] = []
            if keys:
                args: list[str | int] = [self.daemon_id, value, lease_ms, *flags]
                lost = await self.link.call(
                    lambda r: self._links(keys=keys, args=args, client=r), "node_links"
                )
            if gone_keys:
                owner = [self.daemon_id]
                await self.link.call(
                    lambda r: self._unlink(keys=gone_keys, args=owner, client=r), "node_unlink"
                )
            for name in gone:
                await self.store.write_seen(name)
        except RedisUnavailable:
            self.link.fallback("node_registry_skip")  # retried at the next wake
            return
        for name in fresh:
            await self._tell("node_attach", name=name)
        self._fresh -= fresh
        self._gone -= gone
        taken = {live[i - 1] for i in lost}
        for name in taken:  # a newer link at another daemon replaced this one (N-13)
            log.info("node %s connected to another daemon; closing its link here", name)
            self.hub.cut(name)
        self.registered = set(live) - taken
        self.synced.set()
        self.synced = trio.Event()

    async def holders(self, names: list[str]) -> dict[str, str] | None:
        """Which daemon holds each of ``names``' links (absent: none); None when unknown."""
        if not names:
            return {}
        keys = [self._key(n) for n in names]
        try:
            values = await self.link.call(lambda r: r.mget(keys), "node_holders")
        except RedisUnavailable:
            return None
        return {n: json.loads(v)["daemon"] for n, v in zip(names, values, strict=True) if v}

    def _key(self, name: str) -> str:
        return link_key(self.link, name)

    async def note_pair(self, code: str, ttl_s: float) -> None:
        """Say that the pairing ``code`` waits here, so any daemon can approve it."""
        key, value = self.link.key("node", "pair", code), json.dumps({"daemon": self.daemon_id})
        px = max(1, math.ceil(ttl_s * 1000))
        try:
            await self.link.call(lambda r: r.set(key, value, px=px), "node_pair")
        except RedisUnavailable:
            self.link.fallback("node_pair_local")  # approvable only here

    # -- the caller's side -------------------------------------------------------------------

    async def holder(self, name: str) -> str | None:
        """The id of the other daemon holding ``name``'s link, or None; raises OpError
        node_unavailable when that cannot be known now (Redis or its events down)."""
        return await self._holder(self._key(name), name)

    async def forward_run(
        self, name: str, holder: str, action: str, params: Mapping[str, Any]
    ) -> tuple[Checked, bytes | None]:
        """Run ``action`` on ``name`` through ``holder``, the daemon holding its link; raises
        OpError (node_unavailable when the holder does not answer, or the holder's own)."""
        body = {"op": "run", "name": name, "action": action, "params": params}
        answer = await self._forward(holder, name, body)
        media = answer.get("media")
        info = MediaInfo(*media) if media else None
        checked = Checked(
            str(answer["data"]), info, tuple(map(tuple, answer["fields"])), answer["work_ms"]
        )
        if info is None:
            return checked, None
        return checked, await fetch_media(self.link, answer["rid"], info)

    async def forward_approve(self, code: str) -> str:
        """Approve ``code`` at the daemon its node waits on; raises OpError
        pair_code_invalid when no daemon has it."""
        holder = await self._holder(self.link.key("node", "pair", code), code)
        if holder is None:
            raise OpError(ErrorCode.PAIR_CODE_INVALID, "unknown, expired or used", scope=("node",))
        answer = await self._forward(holder, code, {"op": "approve", "code": code})
        return str(answer["name"])

    async def _forward(self, holder: str, what: str, body: dict[str, Any]) -> dict[str, Any]:
        rid = secrets.token_hex(8)
        forward = self._pending[rid] = _Forward()
        try:
            deadline_s = trio.current_effective_deadline() - trio.current_time()
            message = self.link.event(
                "node_task", to=holder, rid=rid, deadline_s=min(deadline_s, 3600.0), **body
            )
            await self._publish(message, what)
            self.counts["forwarded"] += 1
            with trio.move_on_after(self.link.config.node_ack_s):
                await forward.accepted.wait()
            if not forward.accepted.is_set():
                self.counts["route_failures"] += 1
                ack_s = self.link.config.node_ack_s
                raise _unavailable(f"{what}: its daemon {holder} did not answer in {ack_s:g} s")
            await forward.done.wait()  # bounded by the task's deadline (timeout_exceeded)
        finally:
            del self._pending[rid]
        answer = forward.answer
        if not answer.get("ok"):
            code = CODES.get(str(answer.get("code")), ErrorCode.NODE_ERROR)
            raise OpError(code, str(answer.get("detail", ""))[:500], scope=("node",))
        return {**answer, "rid": rid}

    async def _holder(self, key: str, what: str) -> str | None:
        if not self.link.events_live:
            self.counts["route_failures"] += 1
            raise _unavailable(f"{what}: not connected here, and the fleet's events are down")
        try:
            raw = await self.link.call(lambda r: r.get(key), "node_route")
        except RedisUnavailable:
            self.counts["route_failures"] += 1
            raise _unavailable(f"{what}: not connected here, and redis is unavailable") from None
        holder = None if raw is None else json.loads(raw).get("daemon")
        return None if holder is None or holder == self.daemon_id else str(holder)

    async def _publish(self, message: str, what: str) -> None:
        channel = self.link.channel
        try:
            await self.link.call(lambda r: r.publish(channel, message), "node_forward")
        except RedisUnavailable:
            self.counts["route_failures"] += 1
            raise _unavailable(f"{what}: not connected here, and redis is unavailable") from None

    def _on_answer(self, message: dict[str, Any]) -> None:
        forward = self._pending.get(str(message.get("rid")))
        if message.get("to") != self.daemon_id or forward is None:
            return
        forward.accepted.set()
        if "ok" in message:
            forward.answer = message
            forward.done.set()

    # -- the holder's side -------------------------------------------------------------------

    def _on_task(self, message: dict[str, Any]) -> None:
        if message.get("to") == self.daemon_id and self._nursery is not None:
            self._nursery.start_soon(self._serve_task, message)

    async def _serve_task(self, message: dict[str, Any]) -> None:
        caller, rid = str(message.get("from")), str(message.get("rid"))
        if self.serving >= self.max_forwarded:
            self.counts["forward_refused"] += 1
            detail = (
                f"{self.max_forwarded} forwarded node tasks run here (nodes.max_forwarded_tasks)"
            )
            await self._tell(
                "node_answer", to=caller, rid=rid, ok=False, code="busy", detail=detail
            )
            return
        self.serving += 1
        log.info("node task %s from daemon %s: %s", rid, caller, message.get("op"))
        try:
            await self._tell("node_answer", to=caller, rid=rid)  # taken: the caller waits on
            with trio.move_on_after(_deadline_s(message)):
                answer = await self._carry_out(message, rid)
                await self._tell("node_answer", to=caller, rid=rid, **answer)
                self.counts["served"] += 1
        finally:
            self.serving -= 1

    async def _carry_out(self, message: dict[str, Any], rid: str) -> dict[str, Any]:
        try:
            if message.get("op") == "approve":
                return {"ok": True, "name": await self.hub.approve_here(str(message["code"]))}
            name, action, params = checked_task(message)
            checked, data = await self.hub.run_here(name, action, params)
            media = None
            if checked.media is not None and data is not None:
                await store_media(self.link, rid, data)
                media = [checked.media.sha256, checked.media.size, checked.media.mime]
            fields = [list(field) for field in checked.fields]
            return {
                "ok": True,
                "data": checked.data,
                "fields": fields,
                "work_ms": checked.work_ms,
                "media": media,
            }
        except OpError as exc:
            return {"ok": False, "code": str(exc.code), "detail": exc.detail}
        except Exception:  # a bug, or a peer's malformed task: an answer, never the fleet's end
            log.exception("node task %s from a peer daemon failed", rid)
            return {"ok": False, "code": "internal_error", "detail": "see the holder's log"}

    async def _tell(self, kind: str, **data: Any) -> None:
        message, channel = self.link.event(kind, **data), self.link.channel
        try:
            await self.link.call(lambda r: r.publish(channel, message), kind)
        except RedisUnavailable:
            self.link.fallback("node_event_lost")

    def _on_attach(self, message: dict[str, Any]) -> None:
        name = str(message.get("name"))
        if message.get("from") != self.daemon_id and name in self.hub.live_names:
            log.info("node %s connected to another daemon; closing its link here", name)
            self.hub.cut(name)

    def _on_revoke(self, message: dict[str, Any]) -> None:
        name = str(message.get("name"))
        self.store.nodes.pop(name, None)
        if name in self.hub.live_names:
            log.warning("node %s revoked at another daemon; closing its link", name)
            self.hub.cut(name)


def _deadline_s(message: dict[str, Any]) -> float:
    """The seconds a peer's task has left (0 for a malformed value: it is not run).
    NaN and infinity are malformed: move_on_after raises on NaN, and no task runs forever."""
    try:
        seconds = float(message.get("deadline_s", 0.0))
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return max(seconds, 0.0) if math.isfinite(seconds) else 0.0


def link_key(link: RedisLink, name: str) -> str:
    """The key of node ``name``'s link entry. On a Redis Cluster one hash tag for every
    link: the scripts and MGET over several nodes' links touch them together, which a
    cluster allows only within one slot. One server keeps the older layout, so a fleet can
    be upgraded daemon by daemon (a cluster is a new Redis: nothing to carry over)."""
    if link.config.cluster:
        return link.key("node", "link", "{links}", name)
    return link.key("node", "link", name)
