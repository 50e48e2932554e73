"""``pip download`` and a ``git clone`` over https inside the sandbox, each through its rule's
lane of the guard proxy, from local stand-ins: a package index (PEP 503 simple pages and a real
wheel built here) and a git repository served over git's dumb HTTP protocol."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from dataclasses import replace

import pytest
import trio
import trustme

from csp_web.net import GuardConfig
from csp_web.net.guard_proxy import GuardProxy
from specialists.tool.exec import ExecNetwork, ExecRequest, ExecResult, run_command
from specialists.tool.exec.config import ExecConfig, ProgramRule
from tests.net._dns import FixedResolver
from tests.net._origin import Origin, Reply, start_https_origin

from .exec_support import IS_ROOT, NOBODY, make_config, probe, scratch_dir

pytestmark = pytest.mark.slow
LOCAL = GuardConfig(allow_private=("127.0.0.1/32",))  # the stand-ins live on loopback
_WHEEL = "tinypkg-1.0-py3-none-any.whl"


def _wheel() -> bytes:
    """A real, minimal wheel: the module, METADATA, WHEEL and RECORD."""
    files = {
        "tinypkg/__init__.py": b"WORD = 'fetched'\n",
        "tinypkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
        "tinypkg-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(f"{name},,\n" for name in [*files, "tinypkg-1.0.dist-info/RECORD"])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        for name, data in {**files, "tinypkg-1.0.dist-info/RECORD": record.encode()}.items():
            wheel.writestr(name, data)
    return buffer.getvalue()


def _serve_index(origin: Origin, wheel: bytes) -> None:
    digest = hashlib.sha256(wheel).hexdigest()
    page = f'<html><body><a href="/files/{_WHEEL}#sha256={digest}">{_WHEEL}</a></body></html>'
    html = [("content-type", "text/html")]
    origin.routes["/simple/tinypkg/"] = lambda _: Reply(headers=html, body=page.encode())
    origin.routes[f"/files/{_WHEEL}"] = lambda _: Reply(body=wheel)


def _serve_repository(origin: Origin, bare: str) -> None:
    """Every file of the bare repository ``bare`` at ``/repo.git/<path>`` (dumb HTTP)."""
    for directory, _subdirs, files in os.walk(bare):
        for name in files:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                body = f.read()
            route = "/repo.git/" + os.path.relpath(path, bare)
            origin.routes[route] = lambda _, body=body: Reply(body=body)  # type: ignore[misc]


@pytest.fixture
def workspace(ca: trustme.CA) -> Iterator[str]:
    with scratch_dir() as path:
        ca_path = os.path.join(path, "ca.pem")
        ca.cert_pem.write_to_path(ca_path)
        if IS_ROOT:
            os.chown(ca_path, NOBODY, NOBODY)
        yield path


@pytest.fixture
def repository() -> Iterator[str]:
    """A bare git repository of one commit, ready for dumb HTTP (``update-server-info``)."""
    with scratch_dir(owner=None) as source:
        git = ["git", "-C", source, "-c", "user.name=a", "-c", "user.email=a@example.org"]
        subprocess.run([*git, "init", "-q"], check=True)
        with open(os.path.join(source, "README"), "w") as f:
            f.write("cloned through the lane\n")
        subprocess.run([*git, "add", "README"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
        bare = os.path.join(source, "repo.git")
        subprocess.run(["git", "clone", "-q", "--bare", source, bare], check=True)
        subprocess.run(["git", "-C", bare, "update-server-info"], check=True)
        yield bare


@pytest.fixture
async def stand_in(nursery: trio.Nursery, ca: trustme.CA, repository: str) -> Origin:
    origin = await start_https_origin(nursery, ca, ("registry.test",))
    _serve_index(origin, _wheel())
    _serve_repository(origin, repository)
    return origin


def _policy(workspace: str, rule: ProgramRule) -> ExecConfig:
    base = make_config(workspace, max_memory_bytes=1 << 30, max_processes=64)
    return replace(base, allowed_programs=(rule, *base.allowed_programs))


async def _run(config: ExecConfig, command: str) -> ExecResult:
    sandbox = await probe(config, "bwrap")
    network = ExecNetwork(
        GuardProxy(lambda: LOCAL, resolver=FixedResolver({"registry.test": ["127.0.0.1"]})), 32
    )
    with trio.fail_after(120):
        request = ExecRequest(command, timeout_ms=90_000)
        return await run_command(request, config, sandbox=sandbox, network=network)


async def test_pip_downloads_a_wheel_through_its_rules_lane(
    workspace: str, stand_in: Origin
) -> None:
    listed = f"registry.test:{stand_in.port}"
    rule = ProgramRule(
        "python3",
        network=(listed,),
        env={
            "PIP_INDEX_URL": f"https://{listed}/simple/",
            "PIP_CERT": os.path.join(workspace, "ca.pem"),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_CACHE_DIR": "1",
        },
    )
    command = "python3 -m pip download -q --no-deps -d wheels tinypkg"
    result = await _run(_policy(workspace, rule), command)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert result.network_refused == ()
    assert os.listdir(os.path.join(workspace, "wheels")) == [_WHEEL]
    assert stand_in.paths() == ["/simple/tinypkg/", f"/files/{_WHEEL}"]


async def test_git_clones_over_https_through_its_rules_lane(
    workspace: str, stand_in: Origin
) -> None:
    if shutil.which("git", path="/usr/bin") is None:
        pytest.fail("git required: scripts/install-system-deps installs it")
    listed = f"registry.test:{stand_in.port}"
    rule = ProgramRule("git", network=(listed,))
    ca_path = os.path.join(workspace, "ca.pem")
    command = f"git -c http.sslCAInfo={ca_path} clone -q https://{listed}/repo.git copy"
    result = await _run(_policy(workspace, rule), command)
    assert result.exit_code == 0, result.stdout + result.stderr
    with open(os.path.join(workspace, "copy", "README")) as f:
        assert f.read() == "cloned through the lane\n"
    assert result.network_refused == ()
    assert "/repo.git/info/refs" in stand_in.paths()
