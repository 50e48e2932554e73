"""metrics.listen: a real daemon's figures scraped over HTTP and read back with Prometheus'
own parser (``prometheus_client.parser``), on a loopback port and on a Unix socket."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from csp_web.app.compose import open_app_daemon
from csp_web.app.metrics_serve import open_metrics
from csp_web.client.trio_client import open_client
from csp_web.config import Config, MetricsConfig, SocketConfig
from csp_web.config.metrics import tcp_address
from csp_web.core.daemon.compose import Daemon
from csp_web.core.daemon.lifecycle import serve
from protocol import Status, Task
from tests.conftest import Sink

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@asynccontextmanager
async def serving_daemon(
    config: Config, socket_path: str
) -> AsyncIterator[tuple[str | None, Daemon]]:
    """The daemon as ``csp-web serve`` runs it (every specialist, its metrics) on
    ``socket_path``; yields where the metrics are served, and the daemon."""
    async with (
        open_app_daemon(config) as daemon,
        open_metrics(config, daemon) as where,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(partial(serve, daemon, stdio=None, socket_path=socket_path))
        yield where, daemon
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def serving(config: Config, socket_path: str) -> AsyncIterator[str | None]:
    """``serving_daemon``'s place only."""
    async with serving_daemon(config, socket_path) as (where, _):
        yield where


def with_metrics(config: Config, listen: str, *, uids: tuple[int, ...] = ()) -> Config:
    socket = dataclasses.replace(config.socket, allowed_uids=uids)
    return dataclasses.replace(config, metrics=MetricsConfig(listen=listen), socket=socket)


def samples(text: str) -> Samples:
    """Every sample of a scrape, keyed by name and labels, parsed by Prometheus' parser."""
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name, frozenset(sample.labels.items())] = sample.value
    return found


def value(found: Samples, metric: str, **labels: str) -> float:
    return found[metric, frozenset(labels.items())]


async def scrape(where: str, *, host: str | None = None) -> httpx.Response:
    headers = {"host": host} if host else {}
    if where.startswith("unix:"):
        transport = httpx.AsyncHTTPTransport(uds=where.removeprefix("unix:"))
        async with httpx.AsyncClient(transport=transport) as client:
            return await client.get("http://localhost/metrics", headers=headers)
    async with httpx.AsyncClient() as client:
        return await client.get(where, headers=headers)


PING = Task("ping", "SYS", "PONG")
CANCEL_NOTHING = Task("cancel", "SYS", "ACK", fields=(("TARGET", "nothing-7"),))


async def test_a_scrape_counts_each_op_by_status_and_code_in_prometheus_format(
    config: Config, sink: Sink, sock_dir: str
) -> None:
    socket_path = os.path.join(sock_dir, "csp.sock")
    with trio.fail_after(60):
        async with serving(with_metrics(config, "127.0.0.1:0"), socket_path) as where:
            assert where is not None
            assert where.startswith("http://127.0.0.1:")
            async with open_client(socket_path) as client:
                for task in (PING, PING, CANCEL_NOTHING, Task("nope", "SYS", "PONG")):
                    await client.call(task)
            response = await scrape(where)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    found = samples(response.text)
    assert value(found, "csp_web_requests_total", op="ping", status="OK", code="") == 2
    assert (
        value(found, "csp_web_requests_total", op="cancel", status="FAIL", code="unknown_task") == 1
    )
    assert ("csp_web_requests_total", frozenset({("op", "nope")})) not in found
    assert value(found, "csp_web_failed_replies_total", code="unknown_op") == 1
    assert value(found, "csp_web_failed_replies_total", code="unknown_task") == 1
    # The latency histogram: every ping in +Inf, buckets cumulative, a count and a sum.
    assert value(found, "csp_web_request_duration_seconds_count", op="ping") == 2
    assert value(found, "csp_web_request_duration_seconds_bucket", op="ping", le="+Inf") == 2
    bounds = [
        (float(dict(labels)["le"]), v)
        for (name, labels), v in found.items()
        if name == "csp_web_request_duration_seconds_bucket" and ("op", "ping") in labels
    ]
    counts = [count for _, count in sorted(bounds)]
    assert counts == sorted(counts)
    assert len(counts) == 19
    for pool in ("sys", "memory", "web", "tool", "browser", "node"):
        assert value(found, "csp_web_pool_running", pool=pool) >= 0
        assert value(found, "csp_web_pool_queued", pool=pool) == 0
    assert value(found, "csp_web_storage_full", store="outbox") == 0
    assert "csp_web_outbox_depth" in {name for name, _ in found}
    assert value(found, "csp_web_outbox_delivery_lag_seconds") >= 0
    assert value(found, "csp_web_component", line="NODES", name="", key="paired") == 0
    assert value(found, "csp_web_component", line="BROWSER", name="", key="launches") == 0


async def test_metrics_on_a_unix_socket_serve_only_the_uids_the_daemon_admits(
    config: Config, sink: Sink, sock_dir: str
) -> None:
    socket_path = os.path.join(sock_dir, "csp.sock")
    metrics_path = os.path.join(sock_dir, "metrics", "metrics.sock")
    with trio.fail_after(60):
        async with serving(with_metrics(config, metrics_path), socket_path) as where:
            assert where == f"unix:{metrics_path}"
            ours = await scrape(where)
        assert not os.path.exists(metrics_path)  # removed at stop
        others = with_metrics(config, metrics_path, uids=(os.geteuid() + 1,))
        async with serving(others, socket_path) as where:
            assert where is not None
            refused = await scrape(where)
    assert ours.status_code == 200
    assert value(samples(ours.text), "csp_web_in_flight") >= 0
    assert refused.status_code == 403
    assert refused.text == f"uid {os.geteuid()} is not allowed (socket.allowed_uids)\n"


async def test_a_reloaded_allow_list_applies_to_the_next_scrape_of_the_socket(
    config: Config, sink: Sink, sock_dir: str
) -> None:
    socket_path = os.path.join(sock_dir, "csp.sock")
    metrics_path = os.path.join(sock_dir, "metrics.sock")
    with trio.fail_after(60):
        async with serving_daemon(with_metrics(config, metrics_path), socket_path) as (where, d):
            assert where is not None
            before = await scrape(where)
            services = d.dispatcher.services  # as a SIGHUP reload commits new settings
            others = dataclasses.replace(config.socket, allowed_uids=(os.geteuid() + 1,))
            services.config = dataclasses.replace(services.config, socket=others)
            after = await scrape(where)
    assert (before.status_code, after.status_code) == (200, 403)


async def test_metrics_on_a_port_answer_only_its_loopback_names_and_path(
    config: Config, sink: Sink, sock_dir: str
) -> None:
    socket_path = os.path.join(sock_dir, "csp.sock")
    with trio.fail_after(60):
        async with serving(with_metrics(config, "127.0.0.1:0"), socket_path) as where:
            assert where is not None
            port = where.split(":")[2].split("/")[0]
            rebound = await scrape(where, host=f"attacker.example:{port}")
            named = await scrape(where, host=f"localhost:{port}")
            async with httpx.AsyncClient() as client:
                elsewhere = await client.get(where.replace("/metrics", "/other"))
                posted = await client.post(where)
    assert rebound.status_code == 421
    assert named.status_code == 200
    assert elsewhere.status_code == 404
    assert posted.status_code == 405


async def test_without_metrics_listen_nothing_is_served(
    config: Config, sink: Sink, sock_dir: str
) -> None:
    socket_path = os.path.join(sock_dir, "csp.sock")
    with trio.fail_after(60):
        async with serving(config, socket_path) as where, open_client(socket_path) as client:
            assert (await client.call(PING)).status is Status.OK
    assert where is None
    assert config.metrics == MetricsConfig()


@pytest.mark.parametrize(
    ("listen", "address"),
    [
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("127.0.0.1:65535", ("127.0.0.1", 65535)),
        ("[::1]:9464", ("::1", 9464)),
        ("/run/csp-web/metrics.sock", None),
    ],
)
def test_metrics_listen_takes_a_loopback_port_or_a_socket_path(
    listen: str, address: tuple[str, int] | None
) -> None:
    assert tcp_address(listen) == address
    assert MetricsConfig(listen=listen).listen == listen


@pytest.mark.parametrize(
    "listen",
    ["127.0.0.1:65536", "0.0.0.0:9464", "10.0.0.1:9464", "localhost:9464", "9464", "metrics.sock"],
)
def test_metrics_listen_refuses_what_would_leave_the_host_or_is_no_address(listen: str) -> None:
    with pytest.raises(ValueError, match="listen: "):
        MetricsConfig(listen=listen)


def test_the_metrics_socket_folder_is_hidden_from_commands() -> None:
    config = Config(metrics=MetricsConfig(listen="/run/csp-metrics/m.sock"), socket=SocketConfig())
    from csp_web.config import daemon_paths

    assert "/run/csp-metrics" in daemon_paths(config)
