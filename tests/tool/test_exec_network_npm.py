"""``npm install`` inside the sandbox, from a local registry stand-in, through the rule's lane
of the guard proxy (docs/exec-policy.md, "Network by purpose").

The registry is a real HTTPS origin (trustme certificate for ``registry.test``, trusted by npm
through the rule's ``npm_config_cafile`` and by node through ``NODE_EXTRA_CA_CERTS``) serving
the registry's package document (``GET /<name>``: ``versions``, ``dist.tarball``,
``dist.integrity``, ``dist.shasum``) and a real .tgz built here; npm reaches it only by CONNECT
through the lane.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import tarfile
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import trio
import trustme

from csp_web.net import GuardConfig
from csp_web.net.guard_proxy import GuardProxy
from specialists.tool.exec import ExecNetwork, ExecRequest, ExecResult, run_command
from specialists.tool.exec.config import ExecConfig, ProgramRule
from tests.net._dns import FixedResolver
from tests.net._origin import Origin, Reply, start_https_origin

from .exec_support import IS_ROOT, NOBODY, probe, scratch_dir
from .test_exec_policy_npm import documented_policy

pytestmark = pytest.mark.slow
LOCAL = GuardConfig(allow_private=("127.0.0.1/32",))  # the registry lives on loopback
_PACKAGE = "tinypkg"


def _tarball() -> bytes:
    """A real npm package tarball: ``package/package.json`` and ``package/index.js``."""
    files = {
        "package/package.json": json.dumps(
            {"name": _PACKAGE, "version": "1.0.0", "main": "index.js"}
        ).encode(),
        "package/index.js": b"module.exports = 'tiny and fetched';\n",
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _serve_registry(origin: Origin, tarball: bytes) -> None:
    base = f"https://registry.test:{origin.port}"
    digest = base64.b64encode(hashlib.sha512(tarball).digest()).decode()
    dist = {
        "tarball": f"{base}/{_PACKAGE}/-/{_PACKAGE}-1.0.0.tgz",
        "integrity": f"sha512-{digest}",
        "shasum": hashlib.sha1(tarball).hexdigest(),
    }
    document = {
        "name": _PACKAGE,
        "dist-tags": {"latest": "1.0.0"},
        "versions": {"1.0.0": {"name": _PACKAGE, "version": "1.0.0", "dist": dist}},
    }
    json_reply = Reply(headers=[("content-type", "application/json")])
    origin.routes[f"/{_PACKAGE}"] = lambda _: replace(
        json_reply, body=json.dumps(document).encode()
    )
    origin.routes[f"/{_PACKAGE}/-/{_PACKAGE}-1.0.0.tgz"] = lambda _: Reply(body=tarball)


@pytest.fixture
def project(ca: trustme.CA) -> Iterator[str]:
    if shutil.which("npm", path="/usr/bin") is None:
        pytest.fail("npm required: scripts/install-system-deps installs it")
    with scratch_dir() as workspace:
        files = {
            "package.json": json.dumps({"name": "demo", "version": "1.0.0"}),
            "ca.pem": ca.cert_pem.bytes().decode(),
        }
        for name, text in files.items():
            path = os.path.join(workspace, name)
            with open(path, "w") as f:
                f.write(text)
            if IS_ROOT:
                os.chown(path, NOBODY, NOBODY)
        yield workspace


def _npm_policy(project: str, registry: str, network: tuple[str, ...]) -> ExecConfig:
    """The documented policy with ``npm`` given ``network`` and the registry's settings."""
    npm = ProgramRule(
        "npm",
        network=network,
        env={
            "NODE_EXTRA_CA_CERTS": os.path.join(project, "ca.pem"),
            # Debian's /etc/npmrc sets cafile to the system bundle, which replaces node's
            # store and NODE_EXTRA_CA_CERTS for npm's own requests.
            "npm_config_cafile": os.path.join(project, "ca.pem"),
            "npm_config_registry": registry,
            "npm_config_fetch_retries": "0",  # a refusal is final: no 10 s back-off
            "npm_config_update_notifier": "false",
            "npm_config_audit": "false",
            "npm_config_fund": "false",
        },
    )
    config = documented_policy(project)
    return replace(config, allowed_programs=(npm, *config.allowed_programs))


async def _npm(config: ExecConfig, guard: GuardConfig, command: str) -> tuple[ExecResult, Any]:
    sandbox = await probe(config, "bwrap")
    if sandbox.cgroup is None:
        pytest.fail(f"npm needs a cgroup: {sandbox.cgroup_reason}")
    dns = FixedResolver({"registry.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    network = ExecNetwork(GuardProxy(lambda: guard, resolver=dns), 32)
    with trio.fail_after(120):
        request = ExecRequest(command, timeout_ms=90_000)
        result = await run_command(request, config, sandbox=sandbox, network=network)
    return result, dns


@pytest.fixture
async def registry(nursery: trio.Nursery, ca: trustme.CA) -> Origin:
    origin = await start_https_origin(nursery, ca, ("registry.test", "other.test"))
    _serve_registry(origin, _tarball())
    return origin


async def test_npm_install_fetches_a_package_through_its_rules_lane(
    project: str, registry: Origin
) -> None:
    listed = f"registry.test:{registry.port}"
    config = _npm_policy(project, f"https://{listed}/", (listed,))
    result, _dns = await _npm(config, LOCAL, f"npm install {_PACKAGE}")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert result.network_refused == ()
    assert registry.paths() == [f"/{_PACKAGE}", f"/{_PACKAGE}/-/{_PACKAGE}-1.0.0.tgz"]
    assert set(registry.sni_names) == {"registry.test"}  # TLS end to end, inside the tunnel
    with open(os.path.join(project, "node_modules", _PACKAGE, "index.js")) as f:
        assert "tiny and fetched" in f.read()
    used = await _npm(config, LOCAL, f"node -e \"console.log(require('{_PACKAGE}'))\"")
    assert used[0].stdout == "tiny and fetched\n"


async def test_npm_pointed_at_another_host_is_refused_and_told_which(
    project: str, registry: Origin
) -> None:
    listed = f"registry.test:{registry.port}"
    config = _npm_policy(project, f"https://other.test:{registry.port}/", (listed,))
    result, dns = await _npm(config, LOCAL, f"npm install {_PACKAGE}")
    assert result.exit_code != 0
    assert result.network_refused == (
        f"other.test:{registry.port} url_rejected:not-in-network-rule",
    )
    assert (registry.connections, dns.calls) == (0, [])


async def test_npm_reaching_its_listed_name_at_a_private_address_is_refused(
    project: str, registry: Origin
) -> None:
    listed = f"registry.test:{registry.port}"
    config = _npm_policy(project, f"https://{listed}/", (listed,))
    result, _dns = await _npm(config, GuardConfig(), f"npm install {_PACKAGE}")  # no loopback
    assert result.exit_code != 0
    assert result.network_refused == (f"{listed} ssrf_blocked:loopback-127/8",)
    assert registry.connections == 0
    assert not os.path.exists(os.path.join(project, "node_modules", _PACKAGE))


async def test_npm_without_a_network_rule_cannot_fetch(project: str, registry: Origin) -> None:
    config = _npm_policy(project, f"https://registry.test:{registry.port}/", ())
    result, _dns = await _npm(config, LOCAL, f"npm install {_PACKAGE}")
    assert result.exit_code != 0
    assert result.network_refused == ()
    assert registry.connections == 0
