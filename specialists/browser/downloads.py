"""Downloads a page starts (a link with ``Content-Disposition: attachment``, a navigation to a
file, ``<a download>``): capped, kept in web's fileKey store, told in the action's reply.

A context's ``Downloads`` (``PageSet.downloads``) lives on the engine thread. Chromium
fetches a download through the context's own proxy lane, so the guard judges it as any
request. A download is taken only while an action runs on its pages (``arm`` / ``disarm``
from the action's side: a flag, no round trip) or within ``_LATE_S`` after it (a script the
action ran may start one a moment later: it is kept and told with the session's next
action's reply; a one-shot action's pages close with its reply, and such a download with them),
at most ``max_downloads_per_action`` per action; each is watched while it runs and cancelled
once its file passes ``max_download_bytes`` (0: every download is cancelled at once).
``settle`` waits for those running when the action ends, bounded by its deadline; ``keep``
(trio side) reads each finished file once, puts it in the ``FileStore`` and removes
Playwright's file whatever happens. The reply says ``DOWNLOAD <fileKey> <name> <bytes>
<content type>`` for each kept, ``DOWNLOAD_REFUSED <name> <why>`` for each refused (at most
as many), and ``DOWNLOADS_DROPPED <n>`` for the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import mimetypes
import os
import re
import stat
import time
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import trio

from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import ReplyField
from csp_web.core.api.ports import FileStore
from protocol import ErrorCode
from specialists.browser.config import BrowserConfig

log = logging.getLogger(__name__)

_POLL_S = 0.02  # how often a running download's file is measured against the cap
# A navigation answered then aborted (ERR_ABORTED) is Chromium turning it into a download,
# whose event follows by 10-100 ms (seen on a loaded 2-core host; seconds under heavier
# load), sometimes after the action returned. An answer that says ``attachment`` is sure to
# be a download: its action waits for it within its deadline. Any other aborted answer (a
# 204, a navigation another replaced) may be one: its action waits this long at most. A
# download that starts this long after an action ended is still that action's.
_LATE_S = 2.0
_NAME_MAX = 128  # characters of a file name kept
# Anything else becomes _: path separators, controls, spaces (the reply field splits on them).
_UNSAFE = re.compile(r"[^\w.+()-]")
_MAGIC = ((b"%PDF-", "application/pdf"), (b"PK\x03\x04", "application/zip"))
_SCOPE = ("browser",)

REPLIES = (
    ReplyField(
        "DOWNLOAD",
        "an action whose page started a download that was kept",
        "<fileKey> <file name> <bytes> <content type>: read it with REQ:fetch FILE_KEY",
        repeat=True,
    ),
    ReplyField(
        "DOWNLOAD_REFUSED",
        "a download not kept",
        "<file name> <why>: max_download_bytes:0, over:<cap>, max_downloads_per_action:<n>,"
        " between_actions, failed:<reason>, unfinished, no_file_store, storage_full",
        repeat=True,
    ),
    ReplyField("DOWNLOADS_DROPPED", "more refused than are told", "how many more", kind="int"),
)


def safe_name(suggested: str) -> str:
    """A file name to tell and keep: its last path part, no control, separator or space
    characters, no leading dot, at most 128 characters; ``download`` when nothing is left."""
    base = re.split(r"[/\\]", suggested)[-1]
    base = unicodedata.normalize("NFC", base)
    base = "".join(ch if ch.isprintable() else "_" for ch in base)
    base = _UNSAFE.sub("_", base).strip("._")
    return base[-_NAME_MAX:].lstrip("._") or "download"


@dataclass(frozen=True)
class Landed:
    """A download as its action ends: a finished file at ``path`` (Playwright's, removed
    once kept), or ``refused`` with why."""

    url: str
    name: str
    path: str | None
    size: int
    refused: str | None
    download: Any = field(repr=False, compare=False)


@dataclass
class Downloads:
    """One context's downloads (engine thread, but ``arm``/``disarm``/``pending``)."""

    cap: int
    max_count: int
    armed: bool = False
    taken: int = 0
    dropped: int = 0
    landed: list[Landed] = field(default_factory=list)
    running: list[tuple[asyncio.Task[Landed], Any, str]] = field(default_factory=list)
    expected: int = 0  # downloads announced by an aborted navigation, not yet arrived
    sure: int = 0  # of those, announced by an ``attachment`` answer
    # This action's navigations not ended yet: whether their answer said ``attachment``.
    answered: dict[Any, bool] = field(default_factory=dict)
    arrived: asyncio.Event | None = None
    ended: float = -math.inf  # when the last action ended (time.monotonic)

    @classmethod
    def under(cls, config: BrowserConfig) -> Downloads:
        """A context's downloads under ``config``'s caps."""
        return cls(config.max_download_bytes, config.max_downloads_per_action)

    def arm(self) -> None:
        """An action starts: downloads are taken from now (any thread: a flag)."""
        self.armed = True

    def disarm(self) -> None:
        self.armed = False
        self.ended = time.monotonic()

    def pending(self) -> bool:
        """Whether ``settle`` has anything to tell or wait for (any thread)."""
        return bool(self.running or self.landed or self.dropped or self.expected or self.answered)

    def watch(self, page: Any) -> None:
        """Take the downloads ``page`` starts (engine thread)."""
        page.on("download", self._admit)
        page.on("request", self._asked)
        page.on("response", self._answered)
        page.on("requestfinished", self._finished)
        page.on("requestfailed", self._failed)

    def _asked(self, request: Any) -> None:
        if self.armed and request.is_navigation_request():
            self.answered[request] = False  # not answered yet: its action waits for it

    def _answered(self, response: Any) -> None:
        request = response.request
        if request in self.answered:
            self.answered[request] = _says_attachment(response)

    def _finished(self, request: Any) -> None:
        if self.answered.pop(request, None) is not None:
            self._wake()

    def _failed(self, request: Any) -> None:
        """An answered navigation aborted: a download is on its way (its action waits)."""
        if request in self.answered:
            sure = self.answered.pop(request)
            if "ERR_ABORTED" in (request.failure or ""):
                self.expected += 1
                self.sure += sure
            self._wake()

    def _wake(self) -> None:
        if self.arrived is not None:
            self.arrived.set()

    def _admit(self, download: Any) -> None:
        name = safe_name(download.suggested_filename)
        late = self.expected > 0
        if late:
            self.expected -= 1
            self.sure = min(self.sure, self.expected)
            self._wake()
        why = self._refusal(late)
        if why is None:
            self.taken += 1
            task = asyncio.get_running_loop().create_task(self._land(download, name))
            self.running.append((task, download, name))
            return
        asyncio.get_running_loop().create_task(_discard(download))
        if len(self.landed) < self.max_count:
            self.landed.append(Landed(download.url, name, None, 0, why, download))
        else:
            self.dropped += 1

    def _refusal(self, late: bool) -> str | None:
        if not (self.armed or late or time.monotonic() - self.ended < _LATE_S):
            return "between_actions"
        if self.cap == 0:
            return "max_download_bytes:0"
        if self.taken >= self.max_count:
            return f"max_downloads_per_action:{self.max_count}"
        return None

    async def _land(self, download: Any, name: str) -> Landed:
        """Wait for ``download`` to finish, cancelling it once its file passes the cap."""
        finished = asyncio.ensure_future(download.path())
        partial = _partial_path(download)
        try:
            while not finished.done():
                if partial and _running_size(partial) > self.cap:
                    await _discard(download)
                    return Landed(download.url, name, None, 0, f"over:{self.cap}", download)
                await asyncio.wait([finished], timeout=_POLL_S)
            path = str(finished.result())
        except Exception:
            path = None
        finally:
            finished.cancel()
        failure = await download.failure() if path is None else None
        if path is None:
            await _discard(download)
            return Landed(download.url, name, None, 0, f"failed:{failure or 'unknown'}", download)
        size = _size(path)
        if size > self.cap:
            await _discard(download)
            return Landed(download.url, name, None, 0, f"over:{self.cap}", download)
        return Landed(download.url, name, path, size, None, download)

    async def settle(self, timeout_s: float) -> tuple[list[Landed], int]:
        """What this action's downloads came to (and any told since the last): waits for
        those running at most ``timeout_s``, then cancels the rest; clears the record."""
        await self._await_expected(timeout_s)
        self.armed = False
        running, self.running = self.running, []
        if running:
            await asyncio.wait([task for task, _, _ in running], timeout=timeout_s)
        landed, self.landed = self.landed, []
        for task, download, name in running:
            if task.done() and not task.cancelled() and task.exception() is None:
                landed.append(task.result())
                continue
            if task.done() and not task.cancelled():
                log.warning("download %s failed: %r", name, task.exception())
            task.cancel()
            await _discard(download)
            landed.append(Landed(download.url, name, None, 0, "unfinished", download))
        dropped, self.dropped = self.dropped, 0
        # Taken while this action settled (a page's late start): the next action tells them,
        # so they count toward its cap, never past it (CI: 4 told under a cap of 3).
        self.taken = len(self.running)
        return landed, dropped

    async def _await_expected(self, timeout_s: float) -> None:
        """Wait for this action's answered navigations to end and for the downloads the
        aborted ones announced: at most ``timeout_s`` while an ``attachment`` answer's is
        missing, else at most ``_LATE_S``."""
        loop = asyncio.get_running_loop()
        start = loop.time()

        def until() -> float:
            sure = self.sure or any(self.answered.values())
            return start + (timeout_s if sure else min(timeout_s, _LATE_S))

        while (self.expected > 0 or self.answered) and loop.time() < until():
            self.arrived = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), until() - loop.time())
        self.expected = self.sure = 0
        self.arrived = None
        self.answered.clear()

    async def discard(self, landed: Iterable[Landed]) -> None:
        """Remove Playwright's files of ``landed`` (engine thread)."""
        for one in landed:
            await _discard(one.download)


def _says_attachment(response: Any) -> bool:
    """Whether ``response`` names itself an attachment (Chromium downloads it, always)."""
    try:
        disposition = response.headers.get("content-disposition", "")
    except Exception:  # a response Playwright no longer holds
        return False
    return str(disposition).strip().lower().startswith("attachment")


def _partial_path(download: Any) -> str | None:
    """Where Chromium writes ``download`` while it runs: Playwright's artifact path, which
    its public API gives only once finished (so the cap could not act before). None if this
    Playwright keeps it elsewhere: the cap then acts on the finished file alone."""
    try:
        path = download._impl_obj._artifact._initializer["absolutePath"]
    except (AttributeError, KeyError, TypeError):
        return None
    return path if isinstance(path, str) else None


async def _discard(download: Any) -> None:
    """Cancel ``download`` if it runs and remove its files; never raises. Playwright's delete
    leaves a cancelled download's ``.crdownload`` to Chromium, which may remove it later or
    not at all: both names are removed here."""
    with contextlib.suppress(Exception):
        await download.cancel()
    with contextlib.suppress(Exception):
        await download.delete()
    partial = _partial_path(download)
    for path in (partial, f"{partial}.crdownload") if partial else ():
        with contextlib.suppress(OSError):
            os.unlink(path)


def _running_size(path: str) -> int:
    """How much of a running download is on disk: Chromium writes ``<path>.crdownload``
    and renames it to ``path`` when done."""
    return max(_size(path + ".crdownload"), _size(path))


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def content_type(name: str, head: bytes) -> str:
    """The type a kept file is told and stored as: its magic bytes, else its name's
    suffix, else ``application/octet-stream``."""
    for magic, media_type in _MAGIC:
        if head.startswith(magic):
            return media_type
    return mimetypes.guess_type(name, strict=False)[0] or "application/octet-stream"


def read_capped(path: str, cap: int) -> bytes:
    """The file's bytes, read once (a regular file, not followed through a symlink, at most
    ``cap`` bytes, else too_large). Blocking: run it in a thread."""
    # O_NONBLOCK: a FIFO in the downloads folder fails the type check below, never holds the open.
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as held:
        info = os.fstat(held.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OpError(ErrorCode.ACTION_FAILED, "the download is not a file", scope=_SCOPE)
        data = held.read(cap + 1)
    if len(data) > cap:
        raise OpError(ErrorCode.TOO_LARGE, f"download over {cap} bytes", scope=_SCOPE)
    return data


async def keep(
    files: FileStore | None, landed: list[Landed], dropped: int, cap: int
) -> list[tuple[str, str]]:
    """The reply fields for ``landed``: each finished file put in ``files`` (one read, no
    second copy here). Without a store (the web specialist is not open) a file is refused
    ``no_file_store``. The caller removes Playwright's files afterwards, whatever happens."""
    fields: list[tuple[str, str]] = []
    for one in landed:
        if one.refused is not None or one.path is None:
            fields.append(("DOWNLOAD_REFUSED", f"{one.name} {one.refused}"))
            continue
        if files is None:
            fields.append(("DOWNLOAD_REFUSED", f"{one.name} no_file_store"))
            continue
        body = await trio.to_thread.run_sync(read_capped, one.path, cap)
        media_type = content_type(one.name, body[:8])
        try:
            key = await files.put(body, url=one.url, name=one.name, content_type=media_type)
        except OpError as exc:
            fields.append(("DOWNLOAD_REFUSED", f"{one.name} {_store_refusal(exc)}"))
            continue
        finally:
            del body
        fields.append(("DOWNLOAD", f"{key} {one.name} {one.size} {media_type}"))
        log.info("download kept: %s %s bytes as %s", one.name, one.size, key)
    if dropped:
        fields.append(("DOWNLOADS_DROPPED", str(dropped)))
    return fields


def _store_refusal(exc: OpError) -> str:
    """Why the store did not keep a file, as DOWNLOAD_REFUSED says it: ``storage_full``,
    ``over:<n>`` (the store's own bound); anything else is no refusal and is raised."""
    if exc.code is ErrorCode.STORAGE_FULL:
        return "storage_full"
    if exc.code is ErrorCode.TOO_LARGE and exc.detail.startswith("over:"):
        return exc.detail
    raise exc


_TOLD: contextvars.ContextVar[list[tuple[str, str]] | None] = contextvars.ContextVar(
    "browser_downloads_told", default=None
)


@contextlib.contextmanager
def telling() -> Iterator[list[tuple[str, str]]]:
    """Collect, for the block (one browser action), the download fields its pages tell."""
    told: list[tuple[str, str]] = []
    token = _TOLD.set(told)
    try:
        yield told
    finally:
        _TOLD.reset(token)


def tell(fields: list[tuple[str, str]]) -> None:
    """Add ``fields`` to the running action's reply (nothing outside ``telling``)."""
    told = _TOLD.get()
    if told is not None:
        told.extend(fields)
