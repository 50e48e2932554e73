"""What the browser tests share: the guard proxy on its own trio thread (so one Chromium can
serve every test of a module, each test running its own trio loop), the test CA's SPKI hash
for Chromium's trust, a raw TCP listener standing for a private host, and /proc helpers."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import trio
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from csp_web.net import GuardConfig, Resolver
from csp_web.net.guard_proxy import GuardProxy, Refusal
from specialists.browser.config import BrowserConfig
from specialists.browser.pages import PageSet
from specialists.browser.services import Runtime, make_engines

WAIT_S = 30.0  # the bound on every wait here: far past an honest run on a loaded 2-core host


def spki_hash(ca: trustme.CA) -> str:
    """Base64 SHA-256 of the CA's public key: what ``trusted_spki`` takes."""
    cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    der = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


class Refusals:
    """The proxy's refusals as they happen, waitable from any thread."""

    def __init__(self) -> None:
        self.seen: list[Refusal] = []
        self._cond = threading.Condition()

    def add(self, refusal: Refusal) -> None:
        with self._cond:
            self.seen.append(refusal)
            self._cond.notify_all()

    def targets(self) -> set[str]:
        with self._cond:
            return {r.target for r in self.seen}

    async def wait_for(self, targets: Iterable[str]) -> None:
        wanted = set(targets)

        def wait() -> bool:
            with self._cond:
                return self._cond.wait_for(lambda: wanted <= self.targets_unlocked(), WAIT_S)

        assert await trio.to_thread.run_sync(wait), (wanted, self.targets())

    def targets_unlocked(self) -> set[str]:
        return {r.target for r in self.seen}


@dataclass
class ThreadedProxy:
    """A ``GuardProxy`` served by ``trio.run`` in a thread until ``stop``."""

    proxy: GuardProxy
    thread: threading.Thread | None = None
    token: trio.lowlevel.TrioToken | None = None
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)

    def start(self) -> None:
        ready = threading.Event()

        async def main() -> None:
            self.token = trio.lowlevel.current_trio_token()
            with self.scope:
                async with trio.open_nursery() as nursery:
                    await nursery.start(self.proxy.serve)
                    ready.set()

        self.thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
        self.thread.start()
        assert ready.wait(WAIT_S)

    def stop(self) -> None:
        assert self.token is not None
        assert self.thread is not None
        self.token.run_sync_soon(self.scope.cancel)
        self.thread.join(WAIT_S)


class Settable:
    """The guard settings and DNS a test sets; the proxy reads them per request."""

    def __init__(self) -> None:
        self.guard = GuardConfig()
        self.resolver: Resolver | None = None

    def current(self) -> GuardConfig:
        return self.guard


def start_runtime(config: BrowserConfig, settings: Settable) -> tuple[Runtime, ThreadedProxy]:
    proxy = GuardProxy(settings.current)
    served = ThreadedProxy(proxy)
    served.start()
    return make_engines(config, proxy), served


@dataclass
class Listener:
    """A raw TCP listener standing for a private host: it counts every connection made."""

    host: str
    port: int = 0
    connections: int = 0

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host=self.host)
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._count, listeners)

    async def _count(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        await stream.aclose()


async def wait_gone(pages: PageSet) -> None:
    """Return once the engine has seen the page go (bounded); runs on the engine's loop."""
    await asyncio.wait_for(pages.gone.wait(), WAIT_S)


def descendants(root: int) -> list[int]:
    """Every live process under ``root`` (not ``root`` itself)."""
    found: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as children:
                    kids = [int(kid) for kid in children.read().split()]
                    found += kids
                    todo += kids
        except OSError:
            continue
    return found


def chromium_processes(root: int | None = None) -> list[int]:
    """Chromium processes under ``root`` (default: this process), zombies excluded."""
    out = []
    for pid in descendants(root or os.getpid()):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
            with open(f"/proc/{pid}/cmdline", "rb") as cmd:
                argv0 = cmd.read().split(b"\0")[0]
        except OSError:
            continue
        if fields[0] != "Z" and b"chrom" in argv0:
            out.append(pid)
    return out


def browser_main_pid(root: int | None = None) -> list[int]:
    """Chromium browser processes (not renderers or utilities: no --type= argument)."""
    out = []
    for pid in chromium_processes(root):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmd:
                raw = cmd.read()  # children rewrite theirs as one space-joined string
        except OSError:
            continue
        if b"--type=" not in raw:
            out.append(pid)
    return out


Predicate = Callable[[], bool]
