"""Extraction in the worker pool (web.workers, csp_web/infra/workers.py): what a worker
builds is what the daemon built in process; a page whose extraction outlasts the task is
cut with ``worker_failed:timeout``, and a killed worker costs only its own task."""

from __future__ import annotations

import functools
import os
import signal
import ssl
import tempfile
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import trio

from csp_web.app.catalog import config_from_mapping, config_sections
from csp_web.config import Config, ConfigError, with_section
from csp_web.core.api.errors import OpError
from csp_web.infra.workers import open_worker_pool
from csp_web.net import FetchResult
from protocol import Reply, Status
from specialists.web.config import web_section
from specialists.web.pages.loading import Page, build_page, load_page
from specialists.web.pages.ops_fetch import OPS
from specialists.web.services import WebServices, open_web_services
from tests import workers_support
from tests.net._dns import FixedResolver
from tests.net._origin import Origin
from tests.web.conftest import DispatcherFactory
from tests.web.pages_support import ARTICLE, MARKDOWN, fetch, serve

LOADING = "specialists.web.pages.loading"  # what extraction's workers warm up on
WAIT_S = 30.0  # a worker's first page imports the extractor: seconds on a loaded machine
FIXTURES = Path(__file__).parent / "fixtures"
PAGES = {
    "article": ARTICLE.encode(),
    **{
        name: (FIXTURES / name).read_bytes()
        for name in ("ddg_results.html", "searxng_forbidden.html")
    },
    "report": (FIXTURES / "documents" / "src" / "report.html").read_bytes(),
}
# A page of 30,000 linked blocks: about 2.4 s of extraction on the 2-core test host, far past
# the 1 s these tests give a task (extract's own guard bounds it, not the pool's deadline).
SLOW_PAGE = "<html><body>" + "<div><a href='/x'>a</a> b</div>" * 30_000 + "</body></html>"


@pytest.fixture
def web_config(web_config: Config) -> Config:
    """The web tests' config with two workers: these tests are about the pool."""
    return with_section(web_config, "web", replace(web_section(web_config), workers=2))


def response(body: bytes) -> FetchResult:
    url = "https://origin.test/page"
    return FetchResult(url, 200, httpx.Headers(), body, "text/html", None, (url,), 0.1)


@pytest.mark.parametrize("name", sorted(PAGES))
async def test_a_page_built_in_a_worker_equals_the_page_built_in_process(name: str) -> None:
    build = functools.partial(build_page, response(PAGES[name]), fetched_at=1.0)
    async with open_worker_pool(1, warm=LOADING) as pool:
        with trio.fail_after(WAIT_S):
            await pool.wait_warm()
            page = await pool.run(build, deadline=trio.current_time() + WAIT_S, shape=Page)
        assert pool.pids
    assert page == build()
    assert page.markdown


async def test_a_page_loaded_with_workers_equals_the_page_loaded_without(
    web_config: Config, dns: FixedResolver, trust: ssl.SSLContext, origin: Origin
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    pages = []
    for workers in (2, 0):
        config = with_section(web_config, "web", replace(web_section(web_config), workers=workers))
        async with open_web_services(config, resolver=dns, ssl_context=trust) as services:
            with trio.fail_after(WAIT_S):
                await services.pool.wait_warm()
                deadline = trio.current_time() + WAIT_S
                page = await load_page(services, url, no_cache=True, deadline=deadline)
            assert (services.pool.size, len(services.pool.pids)) == (workers, workers)
            pages.append(replace(page, fetched_at=0.0))
    assert pages[0] == pages[1]
    assert pages[0].markdown == MARKDOWN


@pytest.mark.slow
async def test_a_page_whose_extraction_outlasts_the_task_fails_and_the_next_fetch_succeeds(
    make_dispatcher: DispatcherFactory, origin: Origin, web: WebServices
) -> None:
    with trio.fail_after(WAIT_S):
        await web.pool.wait_warm()
    cut = set(web.pool.pids)
    web.config = replace(web.config, guard=replace(web.config.guard, timeout_s=1.0))
    dispatcher = make_dispatcher(OPS)
    slow = serve(origin, "/slow", SLOW_PAGE)
    with trio.fail_after(WAIT_S):
        reply = await fetch(dispatcher, slow)
    fields = (("SCOPE", "[]"), ("DATA", "none"), ("ERROR", "worker_failed:timeout"), ("URL", slow))
    assert reply == Reply(Status.FAIL, fields)
    assert len(cut & set(web.pool.pids)) == len(cut) - 1  # its worker killed, not left running
    web.config = replace(web.config, guard=replace(web.config.guard, timeout_s=WAIT_S))
    reply = await fetch(dispatcher, serve(origin, "/tides", ARTICLE))
    assert ("DATA", MARKDOWN) in reply.fields


async def test_after_a_worker_is_killed_mid_task_the_next_fetch_succeeds(
    make_dispatcher: DispatcherFactory, origin: Origin, web: WebServices
) -> None:
    path = tempfile.mktemp(prefix="pool", suffix=".sock", dir="/tmp")  # a short socket path
    listener = trio.socket.socket(trio.socket.AF_UNIX)
    await listener.bind(path)
    listener.listen()

    async def kill_when_announced() -> None:
        conn, _ = await listener.accept()
        with conn:
            os.kill(int(await conn.recv(64)), signal.SIGKILL)

    task = functools.partial(workers_support.announce_then_sleep, path)
    with trio.fail_after(WAIT_S):
        await web.pool.wait_warm()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(kill_when_announced)
            with pytest.raises(OpError, match="worker_failed:killed:SIGKILL"):
                await web.pool.run(task, deadline=trio.current_time() + WAIT_S)
    listener.close()
    os.unlink(path)
    reply = await fetch(make_dispatcher(OPS), serve(origin, "/tides", ARTICLE))
    assert ("DATA", MARKDOWN) in reply.fields


@pytest.mark.parametrize("workers", [0, 1, 64, None])
def test_web_workers_takes_none_and_zero_to_64(workers: int | None) -> None:
    config = config_from_mapping({"web": {"workers": workers}}, sections=config_sections())
    assert web_section(config).workers == workers


@pytest.mark.parametrize("workers", [-1, 65, 1.5, "2", True])
def test_web_workers_refuses_negatives_past_64_and_non_integers(workers: object) -> None:
    with pytest.raises(ConfigError, match=r"^web\.workers: "):
        config_from_mapping({"web": {"workers": workers}}, sections=config_sections())


def test_unset_web_workers_is_one_per_core_this_process_may_use() -> None:
    assert web_section(Config()).worker_count() == len(os.sched_getaffinity(0))
