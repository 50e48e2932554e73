"""Running one transcript with its cassette: recording it against the live upstreams, or
replaying it offline from a local origin. Each run gets a daemon of its own (fresh state and
cache), whose web specialist's transport is wrapped at ``csp_web.net.TransportWrapper``; the
composition root lends the way to open it (``OpenDaemon``), so the CLI names no specialist."""

from __future__ import annotations

import os
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from typing import Protocol

import httpx
import trio
import trio.testing

from csp_web.cli.cassette import (
    Cassette,
    Redactor,
    credential_variables,
    dump_cassette,
    read_cassette,
    secrets_in_environment,
    wire_host,
)
from csp_web.cli.cassette_episodes import EpisodeTap
from csp_web.cli.cassette_origin import CassetteOrigin, CassetteResolver, make_replay_tls
from csp_web.cli.cassette_tap import Recorder, ReplayTap
from csp_web.cli.transcript import Transcript
from csp_web.config import CacheConfig, Config, GuardConfig, shared_section, with_shared
from csp_web.core.daemon.compose import Daemon
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.net import Resolver, TransportWrapper

# What a replay puts in a credential variable the recording had set: the op sends it, the
# cassette origin never sees the real one, and the redactor blanks it like the real one.
STAND_IN_CREDENTIAL = "cassette-replay-credential"

# How long a run waits, after its last step, for the requests its daemon makes in the
# background (search's PREFETCH): a prefetch is a page load, bounded by guard.timeout_s (10 s).
SETTLE_S = 10.0
SETTLE_CUSHION_S = 0.25  # "every task blocked" must hold this long (trio's own default is 0)
QUIET_S = 1.0

# Plays a transcript on a dispatcher and returns its differences (replay.replay_in_memory).
Play = Callable[[Transcript, Dispatcher], Awaitable[list[str]]]


@dataclass(frozen=True)
class Upstream:
    """Where a recording's requests go: the live internet by default. A test passes its local
    origin instead: a resolver, a TLS context trusting the origin's CA, and the port standing
    in for each scheme's (``divert``: the URLs recorded keep their own)."""

    resolver: Resolver | None = None
    ssl_context: ssl.SSLContext | None = None
    divert: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class WebTransport:
    """The web specialist's guarded client as a cassette run needs it: wrapped at its
    transport, resolving with ``resolver`` and trusting ``ssl_context`` when given."""

    wrap: TransportWrapper
    resolver: Resolver | None = None
    ssl_context: ssl.SSLContext | None = None


class OpenDaemon(Protocol):
    """What the composition root lends the CLI (``csp_web.app.compose.open_app_daemon``):
    open the daemon ``csp-web serve`` runs, its web transport as ``web`` says (``None``: as
    configured); the caller enters it, and everything it opened closes on exit."""

    def __call__(
        self, config: Config, web: WebTransport | None = None, /
    ) -> AbstractAsyncContextManager[Daemon]: ...


async def record_transcript(
    transcript: Transcript,
    cassette_file: str,
    config: Config,
    play: Play,
    upstream: Upstream = Upstream(),
    *,
    open_daemon: OpenDaemon,
    kept: Cassette | None = None,
) -> list[str]:
    """Play ``transcript`` against the upstreams on a daemon from ``open_daemon``, write what
    they answered to ``cassette_file`` (redacted), and return the differences from the
    expected replies (no file is made when no request was). With ``kept``
    (``new_episodes``), the requests it holds are answered from it and only the others go to
    the upstreams; the file is ``kept`` and then those."""
    recorder = Recorder(Redactor(secrets_in_environment(config)), upstream.divert)
    episodes = EpisodeTap(kept or Cassette(), recorder)
    web = WebTransport(episodes.wrap, upstream.resolver, upstream.ssl_context)
    async with open_daemon(_isolated(config), web) as daemon, _background(daemon):
        diffs = await play(transcript, daemon.dispatcher)
        with trio.move_on_after(SETTLE_S):
            await _requests_settled(recorder)
    names = credential_variables(config)
    used = tuple(name for name in names if os.environ.get(name, "").strip())
    cassette = episodes.cassette(used)
    if not cassette.exchanges and not await trio.Path(cassette_file).exists():
        return diffs  # no upstream request: no cassette, as vcrpy saves none (ping, memory)
    text = dump_cassette(cassette)
    await trio.Path(cassette_file + ".tmp").write_text(text, "utf-8")
    await trio.Path(cassette_file + ".tmp").rename(cassette_file)
    return diffs


async def replay_with_cassette(
    transcript: Transcript,
    cassette_file: str,
    config: Config,
    play: Play,
    *,
    open_daemon: OpenDaemon,
) -> list[str]:
    """Play ``transcript`` offline on a daemon from ``open_daemon``, its upstream requests
    answered from ``cassette_file`` by a local origin through the real guard and client; the
    differences, a line per request the cassette could not answer (each such request failed
    FETCH_FAILED cassette_miss) and one per recorded exchange no request took (the cassette
    is stale: record it again)."""
    # No file (``--record-mode none``): an empty cassette, so every request is a miss.
    cassette = await read_cassette(cassette_file) or Cassette()
    hosts = frozenset(wire_host(exchange.url) for exchange in cassette.exchanges)
    with credentials_as_recorded(cassette.credentials, config):
        redactor = Redactor((*secrets_in_environment(config), STAND_IN_CREDENTIAL))
        tls = make_replay_tls(hosts or {"cassette.invalid"})
        origin = CassetteOrigin(cassette.exchanges, redactor)
        async with trio.open_nursery() as nursery:
            await nursery.start(origin.serve, tls.server)
            tap = ReplayTap(redactor, hosts, origin.ports)
            web = WebTransport(tap.wrap, CassetteResolver(hosts), tls.client)
            async with (
                open_daemon(replay_config(config, cassette), web) as daemon,
                _background(daemon),
            ):
                diffs = await play(transcript, daemon.dispatcher)
                with trio.move_on_after(SETTLE_S):
                    await _first_of(origin.wait_all_taken, _quiet)
            nursery.cancel_scope.cancel()
    diffs += [f"cassette miss: {miss}" for miss in tap.misses]
    return diffs + [f"cassette unused: {left.method} {left.url}" for left in origin.unused()]


@asynccontextmanager
async def _background(daemon: Daemon) -> AsyncIterator[None]:
    """The daemon's background tasks (search's prefetch, research jobs) running for the
    block, as ``csp-web serve`` runs them; cancelled at its end."""
    async with trio.open_nursery() as nursery:
        for task in daemon.background:
            await nursery.start(task, daemon.port)
        yield
        nursery.cancel_scope.cancel()


async def _requests_settled(recorder: Recorder) -> None:
    """Return once no task can run and no request is in flight: the requests the daemon
    makes in the background after a reply (search's prefetch) are in the recording. The
    caller bounds the wait."""
    while True:
        # Every task blocked for a moment: a background job queued by the last reply has
        # sent its request (in flight) or finished.
        await trio.testing.wait_all_tasks_blocked(cushion=SETTLE_CUSHION_S)
        if recorder.in_flight == 0:
            return
        await trio.sleep(SETTLE_CUSHION_S)


async def _quiet() -> None:
    # No task could run for a second: with the cassette's origin in this process (it answers
    # at once), no background request is under way, so a stale cassette is told at once.
    await trio.testing.wait_all_tasks_blocked(cushion=QUIET_S)


async def _first_of(*waits: Callable[[], Awaitable[None]]) -> None:
    """Return when the first of ``waits`` returns."""
    async with trio.open_nursery() as nursery:
        for wait in waits:

            async def one(wait: Callable[[], Awaitable[None]] = wait) -> None:
                await wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(one)


def replay_config(config: Config, cassette: Cassette) -> Config:
    """``config`` opened for the cassette's origins only: their host names reach the local
    origin (``allow_private``), their ports and schemes pass the gate; the cache is fresh
    (in the run's state folder, no Redis)."""
    urls = [httpx.URL(exchange.url) for exchange in cassette.exchanges]
    guard = shared_section(config, GuardConfig)
    guard = replace(
        guard,
        allow_private=tuple(dict.fromkeys((*guard.allow_private, *map(wire_host, urls)))),
        allowed_ports=tuple(
            dict.fromkeys((*guard.allowed_ports, *(url.port for url in urls if url.port)))
        ),
        allow_http=guard.allow_http or any(url.scheme == "http" for url in urls),
    )
    config = with_shared(config, GuardConfig, lambda _: guard)
    return _isolated(config)


def _isolated(config: Config) -> Config:
    # The cache lives in the run's own state folder, never an operator's cache directory nor
    # a fleet's shared Redis (whose entries another daemon may have written).
    config = with_shared(config, CacheConfig, lambda cache: replace(cache, directory=None))
    return replace(config, redis=replace(config.redis, url=None))


@contextmanager
def credentials_as_recorded(names: Sequence[str], config: Config) -> Iterator[None]:
    """For the block, each configured credential variable the recording had set holds
    ``STAND_IN_CREDENTIAL`` and the others are unset, so the ops choose the providers they
    chose when recording, on any machine; the environment is restored after."""
    saved = {name: os.environ.get(name) for name in credential_variables(config)}
    try:
        for name in saved:
            if name in names:
                os.environ[name] = STAND_IN_CREDENTIAL
            else:
                os.environ.pop(name, None)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
