"""fetch's render path (issue 24, "JavaScript pages") with real Chromium: an app shell served by
the local HTTPS origin is rendered through the browser's Renderer and its guard proxy, then
read by the same extractor, cache and fileKey snapshot as any page."""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
import trio
import trustme

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config, with_section
from csp_web.core.api.context import Peer
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.memory.outbox import open_outbox
from csp_web.net import GuardConfig
from protocol import Field, Reply, Status, Task
from specialists.browser.config import BrowserConfig
from specialists.browser.engine import BrowserEngine
from specialists.browser.render import ChromiumRenderer
from specialists.browser.services import BrowserServices, Runtime, open_browser_services
from specialists.web.config import WebConfig
from specialists.web.pages.ops_fetch import OPS
from specialists.web.services import WebServices, open_web_services
from tests.harness import build_dispatcher
from tests.net._dns import FixedResolver
from tests.net._origin import Origin
from tests.web.pages_support import hits, serve

from .support import WAIT_S, Listener, Refusals

SHELL_TEXT = "The harbour opens at six and closes when the tide turns."
SHELL = (
    '<!doctype html><html><head><title>Harbour</title></head><body><div id="root"></div>'
    "<script>const p = document.createElement('p');"
    f"p.textContent = {SHELL_TEXT!r}; document.getElementById('root').append(p);</script>"
    "</body></html>"
)
SHELL_MD = f"# Harbour\n\n{SHELL_TEXT}"  # the extractor heads the text with the title
STATIC = "<html><head><title>Quay</title></head><body><p>The quay is two hundred metres long.</p>"
DOM_CAP = 200_000  # web's max_decoded_bytes here: a served shell is far below, a grown DOM not
OP_TIMEOUT_S = 45.0  # the op's deadline for a render (a first Chromium launch on a busy host)
# Each push is 8 MB of doubles, kept: the heap grows until V8's cap stops it (test_browser_lost).
HOG = "const hog = []; while (true) hog.push(new Array(1e6).fill(1.5));"
CONCURRENT = 4  # fetches at once: within the renders' one-shot cap (max_oneshot_per_peer)


def _web_config(config: Config, guard: GuardConfig, timeout_s: float) -> Config:
    return with_section(config, "web", WebConfig(guard=replace(guard, timeout_s=timeout_s)))


@pytest.fixture
def guard(guard: GuardConfig) -> GuardConfig:
    return replace(guard, max_decoded_bytes=DOM_CAP)


@pytest.fixture
def op_timeout_s() -> float:
    return OP_TIMEOUT_S


@pytest.fixture
async def web(
    make_config: functools.partial[Config],
    guard: GuardConfig,
    dns: FixedResolver,
    ca: trustme.CA,
    op_timeout_s: float,
    services: BrowserServices,
    browser_settings: BrowserConfig,
) -> AsyncIterator[WebServices]:
    """Web's services on the same DNS, trusting the origins' CA, with the browser's Chromium
    in its renderer port (as the catalogue hands it over)."""
    trust = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ca.configure_trust(trust)
    config = _web_config(make_config(), guard, op_timeout_s)
    async with open_web_services(config, resolver=dns, ssl_context=trust) as opened:
        with opened.renderer.provided(ChromiumRenderer(services, browser_settings)):
            yield opened


@pytest.fixture
async def pages(
    web: WebServices,
    make_config: functools.partial[Config],
    guard: GuardConfig,
    op_timeout_s: float,
) -> AsyncIterator[Dispatcher]:
    config = _web_config(make_config(), guard, op_timeout_s)
    os.makedirs(config.daemon.state_dir, exist_ok=True)
    async with open_outbox(config.outbox_path, config.outbox, config.memory) as outbox:
        yield build_dispatcher(config, outbox_path(config, outbox), OPS, web)


async def _fetch(pages: Dispatcher, url: str | None, *fields: Field) -> Reply:
    """fetch's reply to ``url`` (None: FILE_KEY in ``fields``), bounded past the op's own
    deadline."""
    with trio.fail_after(OP_TIMEOUT_S + WAIT_S):
        return await pages.run(Task("fetch", "WEB", "CONTENT", url, fields), Peer("t"))


@pytest.mark.slow
async def test_an_app_shell_is_rendered_in_chromium_and_read_with_its_text(
    pages: Dispatcher, origin: Origin
) -> None:
    url = serve(origin, "/shell", SHELL)
    reply = await _fetch(pages, url)
    assert (reply.status, reply.get("DATA"), reply.get("ERROR")) == (Status.OK, SHELL_MD, None)
    assert (reply.get("RENDERED"), reply.get("RENDER_REASON")) == ("browser", "root_div")
    assert reply.get("TITLE") == "Harbour"
    again = await _fetch(pages, url)  # the rendered snapshot is cached like any page
    assert (again.get("DATA"), again.get("CACHED"), again.get("RENDERED")) == (
        SHELL_MD,
        "true",
        "browser",
    )
    assert hits(origin, "/shell") == 2  # one direct load, one render: none for the cached read
    paged = await _fetch(pages, url, ("MAX_CHARS", "10"))
    key = paged.get("FILE_KEY")
    assert (paged.status, paged.get("DATA"), key) == (
        Status.PARTIAL,
        SHELL_MD[:10],
        again.get("FILE_KEY"),
    )
    assert key is not None
    rest = await _fetch(pages, None, ("FILE_KEY", key), ("START", "10"))
    assert rest.get("DATA") == SHELL_MD[10:]


@pytest.mark.slow
async def test_several_urls_say_which_page_was_rendered_on_its_fetch_line(
    pages: Dispatcher, origin: Origin
) -> None:
    shell, static = serve(origin, "/shell", SHELL), serve(origin, "/quay", STATIC)
    reply = await _fetch(pages, None, ("URL", shell), ("URL", static))
    assert reply.status is Status.OK
    lines = {line.split(" ")[1]: line for name, line in reply.fields if name == "FETCH"}
    assert " cached:false rendered:browser " in lines[shell]
    assert "rendered:" not in lines[static]


@pytest.mark.slow
async def test_render_never_answers_the_shell_partial_with_why(
    pages: Dispatcher, origin: Origin
) -> None:
    url = serve(origin, "/shell", SHELL)
    reply = await _fetch(pages, url, ("RENDER", "never"))
    assert (reply.status, reply.get("DATA"), reply.get("ERROR")) == (
        Status.PARTIAL,
        "",
        "empty_content:script_only,render_off",
    )
    assert (reply.get("RENDERED"), reply.get("RENDER_REASON")) == (None, "root_div,render_off")
    assert hits(origin, "/shell") == 1  # Chromium never asked for it


@pytest.mark.slow
async def test_render_always_renders_a_static_page_too(pages: Dispatcher, origin: Origin) -> None:
    url = serve(origin, "/quay", STATIC)
    plain = await _fetch(pages, url)
    assert (plain.get("RENDERED"), plain.get("RENDER_REASON")) == (None, None)  # auto: as served
    reply = await _fetch(pages, url, ("RENDER", "always"))
    assert (reply.status, reply.get("DATA")) == (
        Status.OK,
        "# Quay\n\nThe quay is two hundred metres long.",
    )
    assert (reply.get("RENDERED"), reply.get("RENDER_REASON"), reply.get("CACHED")) == (
        "browser",
        "always",
        "false",  # the direct snapshot does not stand for a rendered one
    )


@pytest.mark.slow
async def test_the_guard_blocks_a_rendered_pages_script_fetch_to_a_private_address(
    pages: Dispatcher, origin: Origin, private: Listener, refusals: Refusals
) -> None:
    leak = f"https://fetch.private.test:{private.port}/secret"
    page = SHELL.replace(
        "</script>",
        f"fetch({leak!r}).then(r => r.text()).then(t => document.body.append(t))"
        ".catch(() => {});</script>",
    )
    url = serve(origin, "/leaky", page)
    reply = await _fetch(pages, url)
    assert (reply.status, reply.get("DATA"), reply.get("RENDERED")) == (
        Status.OK,
        SHELL_MD,
        "browser",
    )
    await refusals.wait_for([f"fetch.private.test:{private.port}"])
    by_target = {r.target: r.error for r in refusals.seen}
    assert by_target[f"fetch.private.test:{private.port}"] == "ssrf_blocked:loopback-127/8"
    assert private.connections == 0


@pytest.mark.slow
async def test_a_dom_its_scripts_grow_past_the_cap_is_too_large(
    pages: Dispatcher, origin: Origin
) -> None:
    grows = SHELL.replace("</script>", f"p.textContent = 'x'.repeat({DOM_CAP});</script>")
    url = serve(origin, "/grows", grows)
    reply = await _fetch(pages, url)
    assert (reply.status, reply.get("ERROR"), reply.get("URL")) == (
        Status.FAIL,
        "too_large:rendered_dom",
        url,
    )


@pytest.mark.slow
async def test_concurrent_fetches_of_one_app_shell_share_one_render(
    pages: Dispatcher, origin: Origin
) -> None:
    url = serve(origin, "/shell", SHELL)
    replies: list[Reply] = []

    async def one() -> None:
        replies.append(await _fetch(pages, url))

    async with trio.open_nursery() as nursery:
        for _ in range(CONCURRENT):
            nursery.start_soon(one)
    assert {(r.status, r.get("DATA"), r.get("RENDERED")) for r in replies} == {
        (Status.OK, SHELL_MD, "browser")
    }
    assert len(replies) == CONCURRENT
    assert hits(origin, "/shell") == 2  # one download (shared), one render (shared)


class TestAPageThatNeverSettles:
    """A render is bounded by the op's deadline (the guard's timeout_s here)."""

    @pytest.fixture
    def op_timeout_s(self) -> float:
        return 6.0

    @pytest.mark.slow
    async def test_auto_answers_what_the_served_html_gave_and_why(
        self, pages: Dispatcher, origin: Origin
    ) -> None:
        hanging = SHELL.replace("</body>", '<img src="/drip/forever"></body>')
        url = serve(origin, "/hangs", hanging)
        reply = await _fetch(pages, url)
        assert (reply.status, reply.get("DATA"), reply.get("ERROR")) == (
            Status.PARTIAL,
            "",
            "empty_content:script_only,render_failed:render_timeout",
        )
        assert (reply.get("RENDERED"), reply.get("RENDER_REASON")) == (
            None,
            "root_div,render_failed:render_timeout",
        )

    @pytest.mark.slow
    async def test_always_is_cut_by_the_deadline_with_a_clear_code(
        self, pages: Dispatcher, origin: Origin
    ) -> None:
        hanging = SHELL.replace("</body>", '<img src="/drip/forever"></body>')
        url = serve(origin, "/hangs", hanging)
        reply = await _fetch(pages, url, ("RENDER", "always"))
        assert reply == Reply(
            Status.FAIL,
            (
                ("SCOPE", "[]"),
                ("DATA", "none"),
                ("ERROR", "fetch_failed:render_timeout"),
                ("URL", url),
            ),
        )


class TestChromiumGoneMidRun:
    """The renderer stays in the port, but its Chromium can no longer be started (removed
    from the disk since the daemon started): a real engine, a path where nothing is."""

    @pytest.fixture
    async def web(
        self,
        make_config: functools.partial[Config],
        guard: GuardConfig,
        dns: FixedResolver,
        ca: trustme.CA,
        runtime: Runtime,
        browser_settings: BrowserConfig,
    ) -> AsyncIterator[WebServices]:
        gone = replace(browser_settings, executable="/nonexistent/chromium")
        engine = BrowserEngine(gone, proxy=runtime.proxy)
        trust = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ca.configure_trust(trust)
        config = _web_config(make_config(), guard, OP_TIMEOUT_S)
        try:
            async with (
                open_browser_services(config, runtime=Runtime(engine, runtime.proxy)) as browser,
                open_web_services(config, resolver=dns, ssl_context=trust) as opened,
            ):
                with opened.renderer.provided(ChromiumRenderer(browser, gone)):
                    yield opened
        finally:
            await engine.aclose()

    @pytest.mark.slow
    async def test_auto_answers_the_shell_as_served_saying_the_render_failed(
        self, pages: Dispatcher, origin: Origin
    ) -> None:
        url = serve(origin, "/shell", SHELL)
        reply = await _fetch(pages, url)
        assert (reply.status, reply.get("DATA"), reply.get("ERROR")) == (
            Status.PARTIAL,
            "",
            "empty_content:script_only,render_failed:browser_unavailable",
        )
        assert reply.get("RENDER_REASON") == "root_div,render_failed:browser_unavailable"
        static = await _fetch(pages, serve(origin, "/quay", STATIC))
        assert (static.status, static.get("RENDER_REASON")) == (Status.OK, None)

    @pytest.mark.slow
    async def test_always_fails_browser_unavailable(
        self, pages: Dispatcher, origin: Origin
    ) -> None:
        url = serve(origin, "/shell", SHELL)
        reply = await _fetch(pages, url, ("RENDER", "always"))
        assert (reply.status, reply.get("DATA"), reply.get("URL")) == (Status.FAIL, "none", url)
        assert (reply.get("ERROR") or "").startswith("browser_unavailable:")


class TestARendererThatCrashes:
    """A Chromium of its own whose renderers' heap is capped at 64 MB: a page that allocates
    without bound crashes its renderer mid-render (page_crashed)."""

    @pytest.fixture
    def browser_settings(self, browser_config: BrowserConfig) -> BrowserConfig:
        return replace(browser_config, max_js_heap_mb=64)

    @pytest.fixture
    async def web(
        self,
        make_config: functools.partial[Config],
        guard: GuardConfig,
        dns: FixedResolver,
        ca: trustme.CA,
        browser_settings: BrowserConfig,
    ) -> AsyncIterator[WebServices]:
        trust = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ca.configure_trust(trust)
        config = _web_config(make_config(), guard, OP_TIMEOUT_S)
        async with (
            open_browser_services(config, resolver=dns) as browser,
            open_web_services(config, resolver=dns, ssl_context=trust) as opened,
        ):
            with opened.renderer.provided(ChromiumRenderer(browser, browser_settings)):
                yield opened

    @pytest.mark.slow
    async def test_auto_answers_the_shell_as_served_and_always_fails_page_crashed(
        self, pages: Dispatcher, origin: Origin
    ) -> None:
        url = serve(origin, "/hog", SHELL.replace("</script>", f"{HOG}</script>"))
        auto = await _fetch(pages, url)
        assert (auto.status, auto.get("DATA"), auto.get("ERROR")) == (
            Status.PARTIAL,
            "",
            "empty_content:script_only,render_failed:page_crashed",
        )
        always = await _fetch(pages, url, ("RENDER", "always"))
        assert (always.status, always.get("ERROR")) == (
            Status.FAIL,
            "page_crashed:renderer crashed",
        )
