"""The node registry: paired nodes, their live links, pending pairings, and running an action
on a node (protocol/NODES.md). Owned by ``NodeServices``; links register here as they say
hello and leave as they end.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from csp_web.core.api.errors import OpError
from csp_web.core.api.replies import Result
from csp_web.infra.media import MediaStore
from protocol import ErrorCode, Task
from specialists.node.config import NodesConfig

from .link import NodeLink
from .results import MEDIA_EXTENSIONS, Checked, check_reply, save_capture
from .store import (
    AlreadyPaired,
    AttemptLimiter,
    NodeStore,
    PairsFull,
    PendingPair,
    PendingPairs,
    normal_code,
)
from .wire import parse_hello

if TYPE_CHECKING:
    from .fleet import NodeFleet

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """What a node gave for one action: its checked reply and, for media, the saved path."""

    checked: Checked
    media_path: str | None
    media_bytes: int


class NodeHub:
    """Every node the daemon knows: the store, live links by name, pairings by code."""

    def __init__(self, config: NodesConfig, store: NodeStore, media_dir: str) -> None:
        self.config = config
        self.store = store
        # Captures, trimmed after each to nodes.media_max_bytes and media_max_age_s.
        self.media = MediaStore(
            media_dir,
            max_bytes=config.media_max_bytes,
            max_age_s=config.media_max_age_s,
            extensions=MEDIA_EXTENSIONS,
        )
        self.links: dict[str, NodeLink] = {}
        self.open_links = 0
        self.pending = PendingPairs(
            config.pair_code_ttl_s, config.max_pending_pairs, config.max_pending_per_source
        )
        self.waiting: dict[str, NodeLink] = {}  # code -> the link that asked
        self.limiter = AttemptLimiter(config.pair_attempts, config.pair_window_s)
        self.tls_address: str | None = None
        self.fingerprint: str | None = None
        self._attached = trio.Event()  # set (and renewed) whenever a link goes live
        self.fleet: NodeFleet | None = None  # redis.url: the registry and forwarding

    # -- links ------------------------------------------------------------------------------

    async def serve_link(self, stream: trio.abc.Stream, source: str) -> None:
        """Serve one node connection until it ends (the transports call this); past
        ``max_links`` open ones it is closed at once."""
        if self.open_links >= self.config.max_links:
            log.warning("node link from %s refused: %d links open", source, self.open_links)
            await trio.aclose_forcefully(stream)
            return
        self.open_links += 1
        try:
            await NodeLink(stream, self, source).serve()
        except* Exception:
            # The links share the transports' nursery: a link's bug must end that link only,
            # never the node listeners or the daemon they run in.
            log.exception("node link from %s failed; it is closed", source)
        finally:
            self.open_links -= 1

    async def on_hello(self, link: NodeLink, task: Task) -> Result:
        hello = parse_hello(task, token_required=True)
        assert hello.token is not None
        record = await self.store.lookup(hello.name)
        if record is not None and self.store.check_token(hello.name, hello.token) is None:
            record = None
        if record is None:
            link.closing = True  # a refused token ends the link (N-5)
            self._count_attempt(link)
            log.warning("node hello refused: %s from %s", hello.name, link.source)
            raise OpError(ErrorCode.PERMISSION_DENIED, "token refused", scope=("node",))
        if link.hello is not None:
            raise OpError(ErrorCode.INVALID_FIELD, "this link already said hello")
        await self.store.greet(record, hello)
        link.hello = hello
        link.paired = True
        self._attach(link)
        beat = f"{self.config.heartbeat_interval_s:g}"
        return Result("welcome", ("node",), (("NODE", hello.name), ("HEARTBEAT_S", beat)))

    async def on_pair(self, link: NodeLink, task: Task) -> Result:
        hello = parse_hello(task, token_required=False)
        if link.hello is not None:
            raise OpError(ErrorCode.INVALID_FIELD, "this link already said who it is")
        self._count_attempt(link)
        if await self.store.lookup(hello.name) is not None:
            raise OpError(ErrorCode.INVALID_FIELD, f"{hello.name} is paired; revoke it first")
        try:
            pair = self.pending.add(hello, link.source, trio.current_time())
        except PairsFull as exc:
            raise OpError(ErrorCode.BUSY, str(exc), scope=("node",)) from None
        link.hello = hello
        link.pair_expires_at = pair.expires_at
        self.waiting[pair.code] = link
        if self.fleet is not None:  # approvable at any daemon of the fleet
            await self.fleet.note_pair(pair.code, self.config.pair_code_ttl_s)
        log.warning(
            "node %s (%s) asks to pair from %s: approve with `csp-web nodes approve %s`",
            hello.name,
            hello.platform,
            link.source,
            pair.code,
        )
        ttl = f"{self.config.pair_code_ttl_s:g}"
        return Result(f"code:{pair.code}", ("node",), (("EXPIRES_S", ttl),))

    def _count_attempt(self, link: NodeLink) -> None:
        if not self.limiter.allow(link.source, trio.current_time()):
            link.closing = True  # the answer is the last frame this link gets
            raise OpError(ErrorCode.RATE_LIMITED, "too many pairing attempts", scope=("node",))

    def _attach(self, link: NodeLink) -> None:
        assert link.name is not None
        older = self.links.get(link.name)
        if older is not None and older is not link:
            log.info("node %s reconnected; closing its older link", link.name)
            older.cut()
        self.links[link.name] = link
        if self.fleet is not None:
            self.fleet.attached(link.name)
        log.info("node %s connected from %s (%s)", link.name, link.source, link.capabilities)
        self._attached.set()
        self._attached = trio.Event()

    async def wait_link(self, name: str, *, other_than: NodeLink | None = None) -> NodeLink:
        """The live link of ``name`` once there is one (other than ``other_than``)."""
        while (link := self.links.get(name)) is None or link is other_than:
            await self._attached.wait()
        return link

    def detach(self, link: NodeLink) -> None:
        if link.name is not None and self.links.get(link.name) is link:
            del self.links[link.name]
            self.store.left(link.name)
            if self.fleet is not None:
                self.fleet.detached(link.name)
            log.info("node %s disconnected", link.name)
        for code in [c for c, waiting in self.waiting.items() if waiting is link]:
            del self.waiting[code]
            pair = self.pending.pairs.get(code)
            if pair is not None:
                self.pending.drop(pair)

    # -- operator ---------------------------------------------------------------------------

    async def approve(self, code: str) -> str:
        """Pair the node that asked with ``code``, here or (redis.url) at the daemon it waits
        on; returns its name. Raises OpError pair_code_invalid (unknown, expired, used, or
        its node left) or node_unavailable."""
        if self.fleet is not None and normal_code(code) not in self.pending.pairs:
            return await self.fleet.forward_approve(normal_code(code))
        return await self.approve_here(code)

    async def approve_here(self, code: str) -> str:
        """``approve`` for a code waiting at this daemon."""
        pair: PendingPair | None = self.pending.take(code, trio.current_time())
        link = self.waiting.pop(pair.code, None) if pair is not None else None
        if pair is None or link is None or link.closed:
            raise OpError(ErrorCode.PAIR_CODE_INVALID, "unknown, expired or used", scope=("node",))
        try:
            token = await self.store.pair(pair.hello)
        except AlreadyPaired:
            link.cut()
            raise OpError(ErrorCode.INVALID_FIELD, f"{pair.hello.name} is already paired") from None
        except ValueError as exc:
            raise OpError(ErrorCode.BUSY, str(exc), scope=("node",)) from None
        try:
            await link.deliver_token(token)
        except OpError:
            await self.store.forget(pair.hello.name)  # it never got its token: not paired
            raise
        record = await self.store.lookup(pair.hello.name)
        if record is not None:
            await self.store.greet(record, pair.hello)
        self._attach(link)
        return pair.hello.name

    async def revoke(self, name: str) -> None:
        """Forget ``name`` and cut its link now, at whichever daemon holds it (its running
        tasks fail node_unavailable); raises OpError node_unknown, or not_available when
        the fleet's store is unavailable."""
        if not await self.store.forget(name):
            raise OpError(ErrorCode.NODE_UNKNOWN, name, scope=("node",))
        link = self.links.pop(name, None)
        if link is not None:
            link.cut()
            if self.fleet is not None:
                self.fleet.detached(name)
        log.warning("node %s revoked", name)

    def pending_listing(self) -> list[dict[str, Any]]:
        """The pairings waiting for approval at this daemon: code, name, platform, source
        and seconds left (N-4)."""
        now = trio.current_time()
        return [
            {
                "code": pair.code,
                "name": pair.hello.name,
                "platform": pair.hello.platform,
                "source": pair.source,
                "expires_in_s": max(0, round(pair.expires_at - now)),
            }
            for pair in self.pending.waiting(now)
        ]

    async def listing(self) -> list[dict[str, Any]]:
        """Every paired node: name, platform, capabilities, connected (to any daemon of the
        fleet, with redis.url), last seen (N-14)."""
        await self.store.refresh()
        names = sorted(self.store.nodes)
        holders = {} if self.fleet is None else await self.fleet.holders(names)
        entries = []
        for record in sorted(self.store.nodes.values(), key=lambda r: r.name):
            link = self.links.get(record.name)
            here = link is not None and not link.closed
            connected = here or (holders is not None and record.name in holders)
            capabilities = link.capabilities if link is not None and here else ()
            entries.append(
                {
                    "name": record.name,
                    "platform": record.platform,
                    "capabilities": list(capabilities or record.capabilities),
                    "connected": connected,
                    "last_seen": None if connected else record.last_seen,
                    "paired_at": record.paired_at,
                }
            )
        return entries

    # -- tasks ------------------------------------------------------------------------------

    async def run(self, name: str, action: str, params: Mapping[str, Any], task_id: str) -> Outcome:
        """Run ``action`` on node ``name``, through the daemon holding its link when that is
        not this one (redis.url); media are saved in this daemon's media folder, which then
        keeps to its bounds. Raises StorageFull("media") for a full disk,
        OpError node_unknown, node_unavailable, node_capability_missing, or what the node's
        reply stands for (N-8 to N-13, N-16 to N-18)."""
        link = self.links.get(name)
        if self.fleet is None or (link is not None and not link.closed):
            checked, data = await self.run_here(name, action, params)
        elif (holder := await self.fleet.holder(name)) is not None:
            checked, data = await self.fleet.forward_run(name, holder, action, params)
        elif await self.store.lookup(name) is None:
            raise OpError(ErrorCode.NODE_UNKNOWN, name, scope=("node",))
        else:
            raise OpError(ErrorCode.NODE_UNAVAILABLE, name, scope=("node",))
        if checked.media is None or data is None:
            return Outcome(checked, None, 0)
        path = await trio.to_thread.run_sync(
            save_capture, self.media, name, task_id, checked.media, data
        )
        return Outcome(checked, path, len(data))

    async def run_here(
        self, name: str, action: str, params: Mapping[str, Any]
    ) -> tuple[Checked, bytes | None]:
        """Run ``action`` on ``name``'s link at this daemon: its checked reply and media."""
        if await self.store.lookup(name) is None:
            raise OpError(ErrorCode.NODE_UNKNOWN, name, scope=("node",))
        link = self.links.get(name)
        if link is None or link.closed:
            raise OpError(ErrorCode.NODE_UNAVAILABLE, name, scope=("node",))
        if action not in link.capabilities:
            raise OpError(ErrorCode.NODE_CAPABILITY_MISSING, action, scope=("node",))
        reply, media = await link.call(action, params)
        checked = check_reply(action, reply, max_text_chars=self.config.max_reply_text_chars)
        if checked.media is None:
            return checked, None
        return checked, media.finish(checked.media)

    @property
    def live_names(self) -> list[str]:
        return sorted(name for name, link in self.links.items() if not link.closed)

    def cut(self, name: str) -> None:
        """End ``name``'s link here, if there is one (revoked or replaced elsewhere)."""
        link = self.links.get(name)
        if link is not None:
            link.cut()
