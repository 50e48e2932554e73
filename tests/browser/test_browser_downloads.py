"""Downloads a page starts (issue 25): through the guard, capped at N and N+1, kept as
fileKeys (never left on disk), told in the action's reply; refused at cap 0; a page starting a
thousand, or naming its file ``../../etc/passwd``, gets nothing more."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import trio

from csp_web.core.api.errors import OpError, StorageFull
from csp_web.core.api.ports import StoredFile
from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import ErrorCode, Reply, Status
from specialists.browser.config import BrowserConfig
from specialists.browser.downloads import Downloads, safe_name
from specialists.browser.services import BrowserServices
from tests.conftest import wait_until
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply

from .conftest import PRIVATE_NAMES
from .support import Listener, Refusals
from .test_browser_op import run, serve, writes

CAP = 1000  # the small cap these tests run under (the default's own test is marked slow)
PDF = b"%PDF-1.4\n" + b"0" * 100


class MemoryFiles:
    """A FileStore (csp_web.core.api.ports) in a dict: what web's store would keep."""

    def __init__(self) -> None:
        self.kept: dict[str, StoredFile] = {}

    async def put(self, body: bytes, *, url: str, name: str, content_type: str) -> str:
        key = "fk_" + hashlib.sha256(url.encode() + body).hexdigest()[:16]
        self.kept[key] = StoredFile(key, url, name, content_type, body)
        return key

    async def get(self, key: str) -> StoredFile:
        if key not in self.kept:
            raise OpError(ErrorCode.UNKNOWN_FILE_KEY, key)
        return self.kept[key]


@pytest.fixture
def browser_settings(
    browser_config: BrowserConfig, request: pytest.FixtureRequest
) -> BrowserConfig:
    """A 1,000-byte cap and 3 downloads per action, unless a test gives its own settings."""
    small = BrowserConfig(max_download_bytes=CAP, max_downloads_per_action=3)
    chosen: BrowserConfig = getattr(request, "param", small)
    return replace(chosen, trusted_spki=browser_config.trusted_spki)


@pytest.fixture
def files(services: BrowserServices) -> Iterator[MemoryFiles]:
    store = MemoryFiles()
    with services.files.provided(store):
        yield store


def attachment(body: bytes, name: str = "report.pdf", kind: str = "application/pdf") -> OriginReply:
    headers = [("content-type", kind), ("content-disposition", f'attachment; filename="{name}"')]
    return OriginReply(headers=headers, body=body)


def link_page(origin: Origin, target: str) -> str:
    return serve(origin, "/links", f'<html><body><a id="get" href="{target}">get</a>'.encode())


async def click_link(dispatcher: Dispatcher, origin: Origin, target: str) -> Reply:
    page = link_page(origin, target)
    session = ("SESSION", "dl")
    opened = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", page), session)
    assert opened.status is Status.OK, opened
    return await run(dispatcher, ("ACTION", "click"), ("SELECTOR", "css:#get"), session)


def told(reply: Reply, name: str) -> list[str]:
    return [value for key, value in reply.fields if key == name]


def left_on_disk(services: BrowserServices) -> list[str]:
    return os.listdir(services.engine.downloads_dir)


async def test_a_clicked_attachment_is_kept_as_a_file_key_and_told(
    dispatcher: Dispatcher, origin: Origin, services: BrowserServices, files: MemoryFiles
) -> None:
    origin.routes["/report"] = lambda _seen: attachment(PDF)
    reply = await click_link(dispatcher, origin, "/report")
    assert reply.status is Status.OK, reply
    (download,) = told(reply, "DOWNLOAD")
    key, name, size, kind = download.split(" ")
    assert (name, size, kind) == ("report.pdf", str(len(PDF)), "application/pdf")
    stored = files.kept[key]
    assert (stored.body, stored.name, stored.url) == (
        PDF,
        "report.pdf",
        origin.url("origin.test", "/report"),
    )
    assert left_on_disk(services) == []  # Playwright's file is removed once kept
    (record,) = [w for w in writes(dispatcher, "audit") if w["action"] == "click"]
    assert record["downloads"] == [key]


async def test_a_navigation_to_a_file_is_a_download(
    dispatcher: Dispatcher, origin: Origin, files: MemoryFiles
) -> None:
    origin.routes["/file.pdf"] = lambda _seen: OriginReply(
        headers=[("content-type", "application/octet-stream")], body=PDF
    )
    url = origin.url("origin.test", "/file.pdf")
    reply = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url))
    assert reply.status is Status.OK, reply
    (download,) = told(reply, "DOWNLOAD")
    key, name, size, kind = download.split(" ")
    assert (name, size, kind) == ("file.pdf", str(len(PDF)), "application/pdf")  # its magic
    assert files.kept[key].body == PDF


async def test_downloads_are_capped_at_n_and_aborted_at_n_plus_1(
    dispatcher: Dispatcher, origin: Origin, services: BrowserServices, files: MemoryFiles
) -> None:
    origin.routes["/n"] = lambda _seen: attachment(b"n" * CAP, "n.bin", "application/x-n")
    origin.routes["/n1"] = lambda _seen: attachment(b"m" * (CAP + 1), "n1.bin", "x/y")
    at_n = await click_link(dispatcher, origin, "/n")
    (kept,) = told(at_n, "DOWNLOAD")
    assert kept.split(" ")[1:3] == ["n.bin", str(CAP)]
    over = await click_link(dispatcher, origin, "/n1")
    assert over.status is Status.OK, over  # the click happened; the file was not kept
    assert told(over, "DOWNLOAD") == []
    assert told(over, "DOWNLOAD_REFUSED") == [f"n1.bin over:{CAP}"]
    assert [stored.body for stored in files.kept.values()] == [b"n" * CAP]
    assert left_on_disk(services) == []


@pytest.mark.parametrize("browser_settings", [BrowserConfig(max_download_bytes=0)], indirect=True)
async def test_a_cap_of_zero_refuses_every_download(
    dispatcher: Dispatcher, origin: Origin, services: BrowserServices, files: MemoryFiles
) -> None:
    origin.routes["/report"] = lambda _seen: attachment(PDF)
    reply = await click_link(dispatcher, origin, "/report")
    assert reply.status is Status.OK, reply
    assert told(reply, "DOWNLOAD") == []
    assert told(reply, "DOWNLOAD_REFUSED") == ["report.pdf max_download_bytes:0"]
    assert files.kept == {}
    assert left_on_disk(services) == []


async def test_a_hostile_file_name_keeps_no_path_part(
    dispatcher: Dispatcher, origin: Origin, files: MemoryFiles
) -> None:
    origin.routes["/evil"] = lambda _seen: attachment(b"root:x:0:0", "../../etc/passwd", "text/x")
    reply = await click_link(dispatcher, origin, "/evil")
    (download,) = told(reply, "DOWNLOAD")
    _key, name, _size, _kind = download.split(" ")
    assert name == "etc_passwd"  # Chromium made it _.._etc_passwd; no dot or separator left
    assert [stored.name for stored in files.kept.values()] == [name]
    assert not os.path.exists("/etc/passwd.1")


def test_file_names_are_sanitised() -> None:
    assert safe_name("../../etc/passwd") == "passwd"
    assert safe_name("..\\..\\boot.ini") == "boot.ini"
    assert safe_name("a\x00b\x1b[31m c.pdf") == "a_b__31m_c.pdf"
    assert safe_name("report\u202etxt.exe") == "report_txt.exe"  # no right-to-left override
    assert safe_name("...") == "download"
    assert safe_name(".bashrc") == "bashrc"
    assert len(safe_name("x" * 1000 + ".pdf")) == 128
    assert safe_name("x" * 1000 + ".pdf").endswith(".pdf")


THOUSAND = b"""<html><body><button id="go" onclick="
for (let i = 0; i < 1000; i++) {
  const a = document.createElement('a');
  a.href = '/many?n=' + i; a.download = 'f' + i + '.bin';
  document.body.appendChild(a); a.click();
}">go</button></body></html>"""


async def test_a_page_starting_a_thousand_downloads_keeps_at_most_the_cap(
    dispatcher: Dispatcher, origin: Origin, services: BrowserServices, files: MemoryFiles
) -> None:
    origin.routes["/many"] = lambda _seen: attachment(b"x" * 10, "f.bin", "x/y")
    page = serve(origin, "/thousand", THOUSAND)
    session = ("SESSION", "many")
    await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", page), session)
    replies = [await run(dispatcher, ("ACTION", "click"), ("SELECTOR", "css:#go"), session)]
    assert len(files.kept) <= 3
    # Chromium starts them while the click returns or later (seconds later on a loaded
    # host): those that began after a reply are told with the next action's.
    with trio.fail_after(30):
        while not any(told(one, "DOWNLOAD") + told(one, "DOWNLOAD_REFUSED") for one in replies):
            await trio.sleep(0.1)
            replies.append(await run(dispatcher, ("ACTION", "extract"), session))
    replies.append(await run(dispatcher, ("ACTION", "extract"), session))  # the page goes on
    for reply in replies:
        assert reply.status is Status.OK, reply
        assert len(told(reply, "DOWNLOAD")) <= 3  # max_downloads_per_action: each its own
        assert len(told(reply, "DOWNLOAD_REFUSED")) <= 3
    assert len(files.kept) <= 3 * len(replies)
    # Those that began just after the extract wait for the next action, or the session's end.
    closed = await run(dispatcher, ("ACTION", "close"), session)
    assert closed.status is Status.OK, closed
    # Chromium removes a cancelled download's file itself, a moment after the cancel.
    await wait_until(lambda: left_on_disk(services) == [], timeout_s=30)


LATER = b"""<html><body><button id="go" onclick="setTimeout(() => {
  const a = document.createElement('a');
  a.href = '/report'; a.download = 'report.pdf';
  document.body.appendChild(a); a.click();
}, 300)">go</button></body></html>"""


async def test_a_download_a_script_starts_after_the_reply_is_told_with_the_next_action(
    dispatcher: Dispatcher, origin: Origin, services: BrowserServices, files: MemoryFiles
) -> None:
    origin.routes["/report"] = lambda _seen: attachment(PDF)
    session = ("SESSION", "later")
    page = serve(origin, "/later", LATER)
    await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", page), session)
    clicked = await run(dispatcher, ("ACTION", "click"), ("SELECTOR", "css:#go"), session)
    assert told(clicked, "DOWNLOAD") == []  # its script had not started it yet
    await wait_until(lambda: left_on_disk(services) != [], timeout_s=30)  # Chromium has it
    later = await run(dispatcher, ("ACTION", "extract"), session)
    (download,) = told(later, "DOWNLOAD")
    assert download.split(" ")[1:3] == ["report.pdf", str(len(PDF))]
    assert told(later, "DOWNLOAD_REFUSED") == []


async def test_a_download_goes_through_the_guard(
    dispatcher: Dispatcher,
    origin: Origin,
    private: Listener,
    refusals: Refusals,
    files: MemoryFiles,
) -> None:
    target = f"https://{PRIVATE_NAMES[0]}:{private.port}/secret.pdf"
    reply = await click_link(dispatcher, origin, target)
    assert told(reply, "DOWNLOAD") == []
    await refusals.wait_for([f"{PRIVATE_NAMES[0]}:{private.port}"])
    assert private.connections == 0
    assert files.kept == {}


async def test_without_a_file_store_a_download_is_refused(
    dispatcher: Dispatcher, origin: Origin, services: BrowserServices
) -> None:
    origin.routes["/report"] = lambda _seen: attachment(PDF)
    reply = await click_link(dispatcher, origin, "/report")
    assert told(reply, "DOWNLOAD_REFUSED") == ["report.pdf no_file_store"]
    assert left_on_disk(services) == []


class RefusingFiles(MemoryFiles):
    """A FileStore that keeps nothing: put raises what web's store raises when it cannot."""

    def __init__(self, refusal: OpError) -> None:
        super().__init__()
        self.refusal = refusal

    async def put(self, body: bytes, *, url: str, name: str, content_type: str) -> str:
        raise self.refusal


@pytest.mark.parametrize(
    ("refusal", "why"),
    [
        (StorageFull("cache"), "storage_full"),
        (OpError(ErrorCode.TOO_LARGE, "over:50"), "over:50"),
    ],
)
async def test_a_download_the_store_did_not_keep_is_refused_not_told_as_kept(
    dispatcher: Dispatcher,
    origin: Origin,
    services: BrowserServices,
    refusal: OpError,
    why: str,
) -> None:
    origin.routes["/report"] = lambda _seen: attachment(PDF)
    with services.files.provided(RefusingFiles(refusal)):
        reply = await click_link(dispatcher, origin, "/report")
    assert reply.status is Status.OK, reply
    assert told(reply, "DOWNLOAD") == []
    assert told(reply, "DOWNLOAD_REFUSED") == [f"report.pdf {why}"]
    assert left_on_disk(services) == []


@pytest.mark.slow
@pytest.mark.parametrize("browser_settings", [BrowserConfig()], indirect=True)
async def test_the_default_cap_keeps_50_mib_and_aborts_one_byte_more(
    dispatcher: Dispatcher, origin: Origin, services: BrowserServices, files: MemoryFiles
) -> None:
    cap = BrowserConfig().max_download_bytes
    assert cap == 50 * 1024 * 1024
    big = b"\0" * cap
    origin.routes["/n"] = lambda _seen: attachment(big, "n.bin", "x/y")
    origin.routes["/n1"] = lambda _seen: attachment(big + b"\0", "n1.bin", "x/y")
    at_n = await click_link(dispatcher, origin, "/n")
    (kept,) = told(at_n, "DOWNLOAD")
    assert kept.split(" ")[1:3] == ["n.bin", str(cap)]
    over = await click_link(dispatcher, origin, "/n1")
    assert told(over, "DOWNLOAD_REFUSED") == [f"n1.bin over:{cap}"]
    assert len(files.kept) == 1
    assert left_on_disk(services) == []


def _endless(_seen: object) -> OriginReply:
    reply = attachment(b"", "endless.bin", "x/y")
    reply.drip = True  # one byte at a time, for ever
    return reply


@pytest.mark.parametrize("browser_settings", [BrowserConfig(max_download_bytes=10)], indirect=True)
async def test_a_running_download_is_cancelled_once_past_the_cap(
    dispatcher: Dispatcher, origin: Origin, services: BrowserServices, files: MemoryFiles
) -> None:
    origin.routes["/endless"] = _endless
    reply = await click_link(dispatcher, origin, "/endless")
    assert told(reply, "DOWNLOAD_REFUSED") == ["endless.bin over:10"]  # not at the deadline
    assert files.kept == {}
    assert left_on_disk(services) == []


class HeldDownload:
    """A download as Playwright hands it over, whose file is ready once ``finish`` is called:
    what ``Downloads`` reads of one (its engine-thread side runs on asyncio)."""

    def __init__(self, directory: Path, name: str) -> None:
        self.suggested_filename = name
        self.url = f"https://origin.test/{name}"
        self.file = directory / name
        self.ready = asyncio.Event()

    def finish(self) -> None:
        self.file.write_bytes(b"x" * 10)
        self.ready.set()

    async def path(self) -> Path:
        await self.ready.wait()
        return self.file

    async def failure(self) -> None:
        return None

    async def cancel(self) -> None:
        self.ready.set()

    async def delete(self) -> None:
        self.file.unlink(missing_ok=True)


def test_downloads_taken_while_an_action_settles_count_toward_the_next_actions_cap(
    tmp_path: Path,
) -> None:
    """A download a page starts just after its action (within the late window) while that
    action still waits for its own is told with the next action, and counts toward the next
    action's cap: never more than ``max_downloads_per_action`` told in one reply."""

    async def actions() -> list[int]:
        downloads = Downloads(cap=1000, max_count=3)
        first = HeldDownload(tmp_path, "first.bin")
        downloads.arm()
        downloads._admit(first)
        downloads.disarm()  # the action ended; its download still runs
        settling = asyncio.ensure_future(downloads.settle(5.0))
        await asyncio.sleep(0.05)  # settle waits for ``first``
        late = [HeldDownload(tmp_path, f"late{i}.bin") for i in range(2)]
        for one in late:
            downloads._admit(one)  # late: taken for the next action
        first.finish()
        told = [len((await settling)[0])]
        downloads.arm()
        more = [HeldDownload(tmp_path, f"next{i}.bin") for i in range(3)]
        for one in more:
            downloads._admit(one)
        downloads.disarm()
        for one in late + more:
            one.finish()
        landed, _ = await downloads.settle(5.0)
        told.append(sum(1 for one in landed if one.path is not None))
        return told

    first, second = asyncio.run(actions())
    assert first == 1
    assert second == 3  # the two late ones and one of the next three; two refused
