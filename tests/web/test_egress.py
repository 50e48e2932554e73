"""The web specialist's trust and egress come from its config alone (issue 24): ``web.tls``
trusts a company CA and ``web.proxy`` carries every request, robots.txt included, through a
CONNECT tunnel to the address the guard approved."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import trio
import trustme

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config, TlsConfig, with_section
from csp_web.memory.outbox import open_outbox
from protocol import Status
from specialists.web import WEB
from specialists.web.config import web_section
from specialists.web.services import open_web_services
from tests.harness import build_dispatcher
from tests.net._dns import FixedResolver
from tests.net._origin import Origin
from tests.net._proxy import start_proxy
from tests.web.pages_support import ARTICLE, TITLE, fetch, serve


async def test_fetch_trusts_the_configured_ca_and_goes_out_through_the_configured_proxy(
    nursery: trio.Nursery,
    web_config: Config,
    dns: FixedResolver,
    origin: Origin,
    ca: trustme.CA,
    tmp_path: Path,
) -> None:
    proxy = await start_proxy(nursery)
    bundle = tmp_path / "company-ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    web = replace(web_section(web_config), tls=TlsConfig(ca_file=str(bundle)), proxy=proxy.url)
    config = with_section(web_config, "web", web)
    url = serve(origin, "/tides", ARTICLE)
    async with (
        open_web_services(config, resolver=dns) as services,  # no test trust: config only
        open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
    ):
        dispatcher = build_dispatcher(config, outbox_path(config, outbox), list(WEB.ops), services)
        reply = await fetch(dispatcher, url)
    assert (reply.status, reply.get("TITLE")) == (Status.OK, TITLE)
    assert proxy.asked
    assert set(proxy.asked) == {f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1"}


async def test_without_the_ca_setting_the_same_fetch_fails_tls_verification(
    web_config: Config, dns: FixedResolver, origin: Origin
) -> None:
    url = serve(origin, "/tides", ARTICLE)
    async with (
        open_web_services(web_config, resolver=dns) as services,
        open_outbox(web_config.outbox_path, web_config.outbox, web_config.memory) as outbox,
    ):
        path = outbox_path(web_config, outbox)
        dispatcher = build_dispatcher(web_config, path, list(WEB.ops), services)
        reply = await fetch(dispatcher, url)
    assert (reply.status, reply.get("ERROR")) == (Status.FAIL, "fetch_failed:tls_verify_failed")
