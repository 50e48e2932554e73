"""Files in and out of a page: ``upload`` (a fileKey's file, or one under a workspace root,
confined as exec's paths are) and ``pdf`` (the page printed, kept as a fileKey); both capped."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from csp_web.config import Config, masked_paths, with_section
from csp_web.core.api.errors import OpError
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.infra.workspace_paths import Identity
from protocol import ErrorCode, Reply, Status
from specialists.browser.config import BrowserConfig
from specialists.browser.services import BrowserServices
from specialists.browser.workspace_files import read_workspace_file
from specialists.tool.config import ToolConfig
from specialists.tool.exec.config import ExecConfig
from tests.net._origin import Origin

from .actions_support import SHOP, MemoryFiles, dispatcher_under
from .test_browser_op import error, open_session, run, serve

ACT = "ACTION"


def ok(reply: Reply) -> Reply:
    assert reply.status is Status.OK, reply
    return reply


@pytest.fixture
def files(services: BrowserServices) -> Iterator[MemoryFiles]:
    store = MemoryFiles()
    with services.files.provided(store):
        yield store


@pytest.fixture
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("work")  # apart from the daemon's state dir (tmp_path)
    # Open to exec's sandbox uid, as a root daemon's roots must be (mktemp makes it 0700).
    root.chmod(0o755)
    (root / "cv.txt").write_bytes(b"Ada Lovelace, analyst")
    (root / "cv.txt").chmod(0o644)
    return root


# ---- reading a workspace file (no browser) ---------------------------------------------------


def test_a_regular_file_under_a_root_is_read(workspace: Path) -> None:
    path = str(workspace / "cv.txt")
    assert read_workspace_file([str(workspace)], path, max_bytes=100) == b"Ada Lovelace, analyst"


def test_a_file_of_max_bytes_is_read_and_one_more_is_too_large(workspace: Path) -> None:
    (workspace / "n.bin").write_bytes(b"x" * 1000)
    (workspace / "n1.bin").write_bytes(b"x" * 1001)
    roots = [str(workspace)]
    assert len(read_workspace_file(roots, str(workspace / "n.bin"), max_bytes=1000)) == 1000
    with pytest.raises(OpError) as refused:
        read_workspace_file(roots, str(workspace / "n1.bin"), max_bytes=1000)
    assert refused.value.code is ErrorCode.TOO_LARGE


def _refusal(roots: list[str], path: str) -> ErrorCode:
    with pytest.raises(OpError) as refused:
        read_workspace_file(roots, path, max_bytes=1 << 20)
    return refused.value.code


def test_paths_that_leave_the_root_or_are_no_regular_file_are_refused(
    workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_bytes(b"secret")
    (workspace / "link.txt").symlink_to(outside)
    (workspace / "out").symlink_to(tmp_path)
    (workspace / "dir").mkdir()
    os.mkfifo(workspace / "fifo")
    roots = [str(workspace)]
    assert _refusal(roots, str(outside)) is ErrorCode.PERMISSION_DENIED
    assert _refusal(roots, str(workspace / ".." / "secret.txt")) is ErrorCode.PERMISSION_DENIED
    assert _refusal(roots, str(workspace / "link.txt")) is ErrorCode.PERMISSION_DENIED
    assert _refusal(roots, str(workspace / "out" / "secret.txt")) is ErrorCode.PERMISSION_DENIED
    assert _refusal(roots, "/dev/zero") is ErrorCode.PERMISSION_DENIED
    assert _refusal(roots, "/proc/self/environ") is ErrorCode.PERMISSION_DENIED
    assert _refusal(roots, str(workspace / "dir")) is ErrorCode.INVALID_FIELD
    assert _refusal(roots, str(workspace / "fifo")) is ErrorCode.INVALID_FIELD  # and no hang
    assert _refusal(roots, str(workspace / "none.txt")) is ErrorCode.INVALID_FIELD
    assert _refusal(roots, "cv.txt") is ErrorCode.INVALID_FIELD
    assert _refusal([], str(workspace / "cv.txt")) is ErrorCode.NOT_AVAILABLE


def test_a_name_too_long_for_the_file_system_is_invalid_field(workspace: Path) -> None:
    roots = [str(workspace)]
    assert _refusal(roots, str(workspace / ("n" * 256))) is ErrorCode.INVALID_FIELD
    assert _refusal(roots, str(workspace / ("d" * 256) / "cv.txt")) is ErrorCode.INVALID_FIELD


def test_a_device_under_a_root_is_not_read(tmp_path: Path) -> None:
    assert _refusal(["/dev"], "/dev/zero") is ErrorCode.PERMISSION_DENIED  # /dev: never a file


def test_a_file_under_a_masked_path_inside_the_root_is_refused_even_through_an_alias(
    workspace: Path,
) -> None:
    secrets = workspace / "secrets"
    secrets.mkdir()
    (secrets / "token.txt").write_bytes(b"hunter2")
    (workspace / "alias").symlink_to(secrets)  # a directory link resolving into the mask
    roots, masked = [str(workspace)], [str(secrets)]
    for path in (secrets / "token.txt", workspace / "alias" / "token.txt"):
        with pytest.raises(OpError) as refused:
            read_workspace_file(roots, str(path), max_bytes=100, masked=masked)
        assert (refused.value.code, refused.value.detail) == (
            ErrorCode.PERMISSION_DENIED,
            str(path),
        )
    with pytest.raises(OpError) as masked_file:  # a mask naming the file itself
        read_workspace_file(
            roots, str(workspace / "cv.txt"), max_bytes=100, masked=[str(workspace / "cv.txt")]
        )
    assert masked_file.value.code is ErrorCode.PERMISSION_DENIED
    # A mask enclosing the root hides nothing in it: exec's bind of the root brings it back.
    enclosing = [str(workspace.parent)]
    cv = str(workspace / "cv.txt")
    assert (
        read_workspace_file(roots, cv, max_bytes=100, masked=enclosing) == b"Ada Lovelace, analyst"
    )


def test_a_directory_resolving_into_proc_sys_or_dev_is_refused_under_any_root(
    tmp_path: Path,
) -> None:
    for kernel, leaf in (
        ("/proc/self", "environ"),
        ("/sys/kernel", "uevent_seqnum"),
        ("/dev", "null"),
    ):
        link = tmp_path / kernel.strip("/").replace("/", "_")
        link.symlink_to(kernel)
        assert _refusal(["/"], str(link / leaf)) is ErrorCode.PERMISSION_DENIED, kernel


def test_the_masked_paths_are_execs_and_the_daemons_own(config: Config, workspace: Path) -> None:
    mask = str(workspace / "secrets")
    exec_config = ExecConfig(workspace_roots=(str(workspace),), masked_paths=(mask,))
    masked = masked_paths(with_section(config, "tool", ToolConfig(exec=exec_config)))
    assert mask in masked
    assert os.path.abspath(config.daemon.state_dir) in masked


# ---- as a root daemon: only what exec's sandbox uid could read -----------------------------

needs_root = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="needs root: files the sandbox uid may not read, and a reader that could",
)
NOBODY = Identity(65534, 65534)  # exec's default run_as_uid/gid


def _as(path: Path, mode: int, uid: int = 0, gid: int = 0) -> str:
    os.chown(path, uid, gid)
    path.chmod(mode)
    return str(path)


@needs_root
def test_as_root_a_file_the_sandbox_uid_may_not_read_is_permission_denied(workspace: Path) -> None:
    """As ``exec cat`` of it would be: the owner, group or other bits of the class the
    sandbox uid falls in, read from the opened file."""
    roots = [str(workspace)]
    for name in ("root600", "root644", "nobody600", "group640", "nobody060"):
        (workspace / name).write_bytes(b"x")
    hidden = workspace / "hidden"
    hidden.mkdir()
    (hidden / "open.txt").write_bytes(b"x")
    readable = {
        _as(workspace / "root600", 0o600): False,
        _as(workspace / "root644", 0o644): True,
        _as(workspace / "nobody600", 0o600, uid=NOBODY.uid): True,
        _as(workspace / "group640", 0o640, gid=NOBODY.gid): True,
        _as(workspace / "nobody060", 0o060, uid=NOBODY.uid, gid=NOBODY.gid): False,  # owner bits
        _as(hidden / "open.txt", 0o644): False,  # its directory is 0700 root's:
    }
    hidden.chmod(0o700)
    for path, expected in readable.items():
        if expected:
            assert read_workspace_file(roots, path, max_bytes=10, reader=NOBODY) == b"x", path
        else:
            with pytest.raises(OpError) as refused:
                read_workspace_file(roots, path, max_bytes=10, reader=NOBODY)
            assert (refused.value.code, refused.value.detail) == (
                ErrorCode.PERMISSION_DENIED,
                path,
            )
        # Without a reader (a daemon that is not root) the daemon's own rights hold.
        assert read_workspace_file(roots, path, max_bytes=10) == b"x"
    workspace.chmod(0o700)  # the root itself closed to the sandbox uid
    try:
        with pytest.raises(OpError) as closed:
            read_workspace_file(roots, str(workspace / "root644"), max_bytes=10, reader=NOBODY)
        assert closed.value.code is ErrorCode.PERMISSION_DENIED
    finally:
        workspace.chmod(0o755)


@needs_root
async def test_as_root_upload_reads_a_workspace_file_as_execs_sandbox_uid(
    services: BrowserServices,
    origin: Origin,
    make_config: functools.partial[Config],
    workspace: Path,
) -> None:
    """The reviewer's case: a 0600 root-owned file under the root, which ``exec cat`` may not
    read, was uploaded to the page."""
    (workspace / "rootonly.txt").write_bytes(b"root only")
    secret = _as(workspace / "rootonly.txt", 0o600)
    roots = (str(workspace),)
    async with dispatcher_under(make_config(), services, workspace_roots=roots) as d:
        _, session = await open_session(d, origin, "up", "/shop", SHOP)
        fields = ((ACT, "upload"), ("SELECTOR", "css:#doc"), ("PATH", secret), session)
        assert error(await run(d, *fields)) == f"permission_denied:{secret}"
        cv = str(workspace / "cv.txt")
        fields = ((ACT, "upload"), ("SELECTOR", "css:#doc"), ("PATH", cv), session)
        assert ok(await run(d, *fields)).get("UPLOAD_BYTES") == "21"


# ---- upload --------------------------------------------------------------------------------


async def test_upload_of_a_workspace_file_gives_the_file_input_its_bytes(
    services: BrowserServices,
    origin: Origin,
    make_config: functools.partial[Config],
    workspace: Path,
) -> None:
    roots = (str(workspace),)
    async with dispatcher_under(make_config(), services, workspace_roots=roots) as d:
        _, session = await open_session(d, origin, "up", "/shop", SHOP)
        path = str(workspace / "cv.txt")
        fields = ((ACT, "upload"), ("SELECTOR", "css:#doc"), ("PATH", path), session)
        reply = ok(await run(d, *fields))
        assert (reply.get("UPLOAD_NAME"), reply.get("UPLOAD_BYTES")) == ("cv.txt", "21")
        got = "cv.txt:text/plain:21:Ada Lovelace, analyst"
        ok(await run(d, (ACT, "wait"), ("TEXT", got), session))  # the page read the file
        outside = await run(d, (ACT, "upload"), ("SELECTOR", "css:#doc"), ("PATH", "/etc/passwd"))
        assert error(outside) == "permission_denied:/etc/passwd"


async def test_upload_refuses_a_file_under_execs_masked_paths_inside_the_root(
    services: BrowserServices,
    origin: Origin,
    make_config: functools.partial[Config],
    workspace: Path,
) -> None:
    secrets = workspace / "secrets"
    secrets.mkdir()
    (secrets / "token.txt").write_bytes(b"hunter2")
    exec_config = ExecConfig(workspace_roots=(str(workspace),), masked_paths=(str(secrets),))
    config = with_section(make_config(), "tool", ToolConfig(exec=exec_config))
    async with dispatcher_under(config, services) as d:
        _, session = await open_session(d, origin, "up", "/shop", SHOP)
        path = str(secrets / "token.txt")
        fields = ((ACT, "upload"), ("SELECTOR", "css:#doc"), ("PATH", path), session)
        assert error(await run(d, *fields)) == f"permission_denied:{path}"
        cv = str(workspace / "cv.txt")
        fields = ((ACT, "upload"), ("SELECTOR", "css:#doc"), ("PATH", cv), session)
        assert ok(await run(d, *fields)).get("UPLOAD_BYTES") == "21"


async def test_upload_of_a_file_key_gives_the_file_input_the_stored_file(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin, files: MemoryFiles
) -> None:
    key = await files.put(
        b"%PDF-1.4 tiny", url="https://a.test/r", name="r.pdf", content_type="application/pdf"
    )
    _, session = await open_session(dispatcher, origin, "key", "/shop", SHOP)
    fields = ((ACT, "upload"), ("SELECTOR", "css:#doc"), ("FILE_KEY", key), session)
    ok(await run(dispatcher, *fields))
    got = "r.pdf:application/pdf:13:%PDF-1.4 tiny"
    ok(await run(dispatcher, (ACT, "wait"), ("TEXT", got), session))  # the page read the file
    unknown = await run(
        dispatcher,
        (ACT, "upload"),
        ("SELECTOR", "css:#doc"),
        ("FILE_KEY", "fk_aaaaaaaaaaaaaaaa"),
        session,
    )
    assert error(unknown) == "unknown_file_key:fk_aaaaaaaaaaaaaaaa"


@pytest.mark.parametrize(("size", "good"), [(1000, True), (1001, False)])
async def test_an_uploaded_file_key_is_capped_at_n(
    services: BrowserServices,
    origin: Origin,
    make_config: functools.partial[Config],
    browser_settings: BrowserConfig,
    files: MemoryFiles,
    size: int,
    good: bool,
) -> None:
    key = await files.put(b"x" * size, url="https://a.test/x", name="x.bin", content_type="x/y")
    capped = replace(browser_settings, max_upload_bytes=1000)
    async with dispatcher_under(make_config(), services, browser=capped) as d:
        _, session = await open_session(d, origin, "cap", "/shop", SHOP)
        reply = await run(d, (ACT, "upload"), ("SELECTOR", "css:#doc"), ("FILE_KEY", key), session)
    if good:
        assert ok(reply).get("UPLOAD_BYTES") == "1000"
    else:
        assert error(reply).startswith("too_large:")


async def test_upload_takes_a_file_key_or_a_path_and_needs_a_store_for_keys(
    dispatcher: Dispatcher,
) -> None:
    neither = await run(dispatcher, (ACT, "upload"), ("SELECTOR", "css:#doc"))
    assert error(neither).startswith("missing_field:FILE_KEY or PATH")
    both = ((ACT, "upload"), ("SELECTOR", "css:#doc"), ("PATH", "/a"), ("FILE_KEY", "fk_a"))
    assert error(await run(dispatcher, *both)).startswith("missing_field:")
    keyed = ((ACT, "upload"), ("SELECTOR", "css:#doc"), ("FILE_KEY", "fk_aaaaaaaaaaaaaaaa"))
    assert error(await run(dispatcher, *keyed)).startswith("not_available:")


LEAVING = SHOP.replace(
    b"document.getElementById('got').textContent =",
    b"location.href = '/ordered'; document.getElementById('got').textContent =",
)


async def test_a_page_that_navigates_away_mid_upload_leaves_a_clear_answer_and_a_live_session(
    dispatcher: Dispatcher, origin: Origin, files: MemoryFiles
) -> None:
    serve(origin, "/ordered", b"<title>Ordered</title>")
    key = await files.put(b"y" * 200_000, url="https://a.test/y", name="y.bin", content_type="x/y")
    _, session = await open_session(dispatcher, origin, "leave", "/leaving", LEAVING)
    reply = await run(
        dispatcher, (ACT, "upload"), ("SELECTOR", "css:#doc"), ("FILE_KEY", key), session
    )
    assert reply.status is Status.OK or error(reply).split(":")[0] in ("action_failed",)
    ok(await run(dispatcher, (ACT, "wait"), ("URL", "**/ordered"), session))
    after = ok(await run(dispatcher, (ACT, "extract"), session))
    assert after.get("TITLE") == "Ordered"


# ---- pdf -----------------------------------------------------------------------------------


async def test_pdf_prints_the_page_to_a_file_key(
    dispatcher: Dispatcher, origin: Origin, files: MemoryFiles
) -> None:
    url, session = await open_session(dispatcher, origin, "pdf", "/shop", SHOP)
    reply = ok(await run(dispatcher, (ACT, "pdf"), session))
    key = reply.get("FILE_KEY") or ""
    stored = await files.get(key)
    assert stored.body.startswith(b"%PDF-")
    assert (stored.url, stored.name, stored.content_type) == (url, "page.pdf", "application/pdf")
    assert reply.get("PDF_BYTES") == str(len(stored.body))


async def test_pdf_is_capped_at_n_bytes(
    dispatcher: Dispatcher,
    services: BrowserServices,
    origin: Origin,
    make_config: functools.partial[Config],
    browser_settings: BrowserConfig,
    files: MemoryFiles,
) -> None:
    _, session = await open_session(dispatcher, origin, "pdfcap", "/shop", SHOP)
    size = int(ok(await run(dispatcher, (ACT, "pdf"), session)).get("PDF_BYTES") or 0)
    for cap, good in ((size, True), (size - 1, False)):
        capped = replace(browser_settings, max_pdf_bytes=cap)
        async with dispatcher_under(make_config(), services, browser=capped) as d:
            reply = await run(d, (ACT, "pdf"), session)
        if good:
            assert ok(reply).get("PDF_BYTES") == str(size)
        else:
            assert error(reply) == f"too_large:PDF over {cap} bytes (tool.browser.max_pdf_bytes)"


async def test_pdf_without_a_file_store_is_not_available(dispatcher: Dispatcher) -> None:
    assert error(await run(dispatcher, (ACT, "pdf"))) == "not_available:pdf: no fileKey store"
