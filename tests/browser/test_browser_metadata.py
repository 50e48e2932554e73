"""Issue 22: the browser is held to the web ops' table of cloud metadata services. A page's
requests to each (by address and by name) are refused by the proxy with the same rule, and
navigating to one is refused before the browser is asked."""

from __future__ import annotations

import pytest

from csp_web.core.dispatch.dispatcher import Dispatcher
from specialists.browser.services import BrowserServices
from tests.net._dns import FixedResolver
from tests.net._hostile_urls import assert_catalogued_failure, malformed
from tests.net._metadata import METADATA_NAMES, METADATA_TARGETS
from tests.net._origin import Origin

from .conftest import CERT_NAMES
from .support import Refusals
from .test_browser_op import error, run, serve
from .test_canvas_op import canvas

# Chromium keeps a name's case and final dot to itself; the proxy sees the lower-case name.
PAGE_TARGETS = [(host, rule) for host, rule in METADATA_TARGETS if host == host.lower()]


def metadata_page(port: int) -> bytes:
    images = "".join(
        f'<img src="https://{host}:{port}/latest/meta-data/">' for host, _ in PAGE_TARGETS
    )
    return f"<html><head><title>Metadata</title></head><body>{images}</body></html>".encode()


def proxy_target(host: str, port: int) -> str:
    """How the proxy records a CONNECT target: host without brackets, then the port."""
    return f"{host.strip('[]')}:{port}"


async def test_a_page_s_requests_to_cloud_metadata_are_refused_by_the_proxy_by_rule(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin, refusals: Refusals
) -> None:
    # Every metadata name answers the origin's 127.0.0.1, which the guard opens: only the
    # name rule stands between the page and that address.
    answers = {name: ["127.0.0.1"] for name in CERT_NAMES}
    answers.update({name.lower().rstrip("."): ["127.0.0.1"] for name, _ in METADATA_NAMES})
    services.proxy.resolver = FixedResolver(answers)
    url = serve(origin, "/metadata", metadata_page(origin.port))
    reply = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url), ("SESSION", "md"))
    assert reply.get("TITLE") == "Metadata", reply
    wanted = {proxy_target(host, origin.port): rule for host, rule in PAGE_TARGETS}
    await refusals.wait_for(wanted)
    by_target = {r.target: r.error for r in refusals.seen}
    assert {target: by_target[target] for target in wanted} == wanted
    assert origin.paths().count("/latest/meta-data/") == 0


@pytest.mark.parametrize(("host", "rule"), METADATA_TARGETS)
async def test_navigating_to_cloud_metadata_is_refused_by_rule(
    dispatcher: Dispatcher, origin: Origin, host: str, rule: str
) -> None:
    target = f"https://{host}:{origin.port}/latest/meta-data/"
    reply = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", target))
    assert error(reply) == rule
    assert origin.requests == []


async def test_navigate_and_canvas_answer_every_malformed_url_with_a_catalogue_code(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    for url in malformed(origin):
        navigated = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url))
        presented = await canvas(dispatcher, ("ACTION", "present"), ("URL", url))
        for reply in (navigated, presented):
            assert_catalogued_failure(reply)
    assert origin.requests == []
