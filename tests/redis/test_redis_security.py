"""Redis AUTH with an ACL user (its password from an environment variable, never in a
reply or the stats line) and TLS (rediss://) with a CA file."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trustme

from csp_web.config.redis import RedisConfig
from csp_web.infra.redis_cache import RedisCache
from csp_web.infra.redis_link import open_redis_link
from tests.redis_server import RedisServer

SECRET = "s3cret-for-the-test"


@pytest.fixture
def acl_server() -> Iterator[RedisServer]:
    directory = tempfile.mkdtemp(prefix="csp-redis-", dir="/tmp")
    # The ACL user may touch only the csp-web prefix; the default user is off.
    user = (
        "--user", "fleet", "on", f">{SECRET}", "~csp-web:*", "&csp-web:*", "+@all",
        "--user", "default", "off",
    )  # fmt: skip
    server = RedisServer(directory, extra=user)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


async def test_an_acl_user_with_its_password_from_the_environment_shares_the_cache(
    acl_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEET_REDIS_PASSWORD", SECRET)
    config = RedisConfig(
        url=acl_server.url, username="fleet", password_env="FLEET_REDIS_PASSWORD", retry_s=1e-3
    )
    async with open_redis_link(config) as link:
        assert link is not None
        cache = RedisCache(link, memory_bytes=1 << 20)
        await cache.set("search", "q", ["hit"], ttl_s=60)
        assert await cache.get("search", "q") == ["hit"]
        assert link.up


async def test_a_wrong_password_is_a_fallback_whose_report_holds_no_secret(
    acl_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEET_REDIS_PASSWORD", "not-" + SECRET)
    config = RedisConfig(url=acl_server.url, username="fleet", password_env="FLEET_REDIS_PASSWORD")
    async with open_redis_link(config) as link:
        assert link is not None
        cache = RedisCache(link, memory_bytes=1 << 20)
        with trio.fail_after(5):
            assert await cache.get("search", "q") is None
        line = json.loads(link.stats_line())
        assert line["state"] == "down"
        assert "AuthenticationError" in line["error"] or "WRONGPASS" in line["error"]
        assert SECRET not in link.stats_line()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_rediss_with_the_servers_ca_file_shares_the_cache(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "server.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    port = free_port()
    tls = (
        "--tls-port", str(port),
        "--tls-cert-file", str(tmp_path / "server.pem"),
        "--tls-key-file", str(tmp_path / "server.key"),
        "--tls-ca-cert-file", str(tmp_path / "ca.pem"),
        "--tls-auth-clients", "no",
        "--bind", "127.0.0.1",
    )  # fmt: skip
    directory = tempfile.mkdtemp(prefix="csp-redis-", dir="/tmp")
    server = RedisServer(directory, extra=tls)
    server.start()
    try:
        # The first call carries the TCP and TLS handshakes: on a loaded 2-core host they
        # outlast the default 0.25 s call bound (seen failing under a CPU hog), and this test
        # is about trust, not speed.
        config = RedisConfig(
            url=f"rediss://localhost:{port}/0",
            tls_ca_file=str(tmp_path / "ca.pem"),
            call_timeout_s=10.0,
        )
        async with open_redis_link(config) as link:
            assert link is not None
            cache = RedisCache(link, memory_bytes=1 << 20)
            await cache.set("fetch", "u", "over tls", ttl_s=60)
            assert await cache.get("fetch", "u") == "over tls"
            assert link.up, link.last_error
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
