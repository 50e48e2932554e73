"""fetch's render modes without Chromium (issue 24, "JavaScript pages"): the app-shell tells, at
their limits; auto acting as never when no renderer is in the port, and saying so; RENDER
always refused before any load; web.fetch.render read from the settings. The render itself
(real Chromium) is tests/browser/test_render_fetch.py."""

from __future__ import annotations

import gzip
from dataclasses import replace

import pytest

from bench.extraction import DEFAULT_CORPORA, DEFAULT_CORPUS
from csp_web.config import Config, with_section
from csp_web.core.api.errors import OpError
from csp_web.net.charset import decode_body
from protocol import Reply, Status
from specialists.web.config import FetchConfig, web_section
from specialists.web.pages.appshell import SCRIPT_RATIO, TINY_TEXT_CHARS, shell_reason
from specialists.web.pages.emptiness import PLACEHOLDER_WORDS, is_placeholder
from specialists.web.pages.ops_fetch import OPS
from specialists.web.pages.ops_summarize import OPS as SUMMARIZE_OPS
from specialists.web.pages.reading import read_page
from specialists.web.pages.rendering import check_size
from tests.net._origin import Origin
from tests.web.conftest import DispatcherFactory
from tests.web.pages_support import ARTICLE, fetch, hits, run, serve

SHELL = '<html><head><title>App</title></head><body><div id="root"></div><script src="/a.js">'
SHELL += "</script></body></html>"


@pytest.mark.parametrize(
    ("html", "text", "why"),
    [
        ('<div id="root"></div><script src="/a.js"></script>', "", "root_div"),
        ("<div id=app>\n </div><script>go()</script>", "", "root_div"),
        ('<div id="__next"></div><script>go()</script>', "", "root_div"),
        ("<noscript>Please enable JavaScript.</noscript><script>go()</script>", "x", "noscript"),
        (f"<p>hi</p><script>{'x' * SCRIPT_RATIO * 2}</script>", "hi", "script_heavy"),
        (f"<p>hi</p><script>{'x' * (SCRIPT_RATIO * 2 - 1)}</script>", "hi", None),
        ('<div id="root"></div>', "", None),  # a mount point with no script is not a shell
        ('<div id="root"><p>served</p></div><script>go()</script>', "served", None),
        ("<noscript>No images without a plug-in.</noscript><script>go()</script>", "x", None),
    ],
)
def test_an_app_shell_is_told_by_general_rules(html: str, text: str, why: str | None) -> None:
    assert shell_reason(html, text) == why


def test_a_page_with_enough_text_is_read_as_served_whatever_its_scripts() -> None:
    shell = '<div id="root"></div><script>go()</script>'
    assert shell_reason(shell, "x" * (TINY_TEXT_CHARS - 1)) == "root_div"
    assert shell_reason(shell, "x" * TINY_TEXT_CHARS) is None


def test_a_rendered_dom_is_capped_in_bytes_as_a_decoded_body_is() -> None:
    check_size("é" * 5, 10)  # 10 bytes of UTF-8: at the cap
    with pytest.raises(OpError) as over:
        check_size("é" * 5 + "x", 10)
    assert (over.value.code.value, over.value.detail) == ("too_large", "rendered_dom")


async def test_auto_without_chromium_reads_the_shell_as_served_and_says_why(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/app", SHELL)
    reply = await fetch(make_dispatcher(OPS), url)
    assert (reply.status, reply.get("ERROR"), reply.get("RENDER_REASON")) == (
        Status.PARTIAL,
        "empty_content:script_only,render_unavailable",
        "root_div,render_unavailable",
    )
    assert reply.get("RENDERED") is None


async def test_render_never_says_the_render_was_off(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/app", SHELL)
    reply = await fetch(make_dispatcher(OPS), url, ("RENDER", "never"))
    assert (reply.status, reply.get("ERROR"), reply.get("RENDER_REASON")) == (
        Status.PARTIAL,
        "empty_content:script_only,render_off",
        "root_div,render_off",
    )


def _next_shell(placeholder: str) -> str:
    """A Next.js-style shell: its mount point holds a placeholder until the bundle runs."""
    return (
        "<!doctype html><html><head><title>Dashboard</title></head><body>"
        f'<div id="__next"><p>{placeholder}</p></div>'
        '<script src="/_next/static/chunks/main.js"></script>'
        '<script id="__NEXT_DATA__" type="application/json">{"props":{}}</script>'
        "</body></html>"
    )


@pytest.mark.parametrize(
    ("render", "why"), [("never", "render_off"), ("auto", "render_unavailable")]
)
async def test_a_shell_showing_only_a_placeholder_is_partial_empty_content(
    make_dispatcher: DispatcherFactory, origin: Origin, render: str, why: str
) -> None:
    """The title and "Loading..." are what the scripts have not written yet, not content."""
    url = serve(origin, "/dashboard", _next_shell("Loading..."))
    reply = await fetch(make_dispatcher(OPS), url, ("RENDER", render), ("NO_CACHE", "true"))
    assert (reply.status, reply.get("ERROR"), reply.get("RENDER_REASON")) == (
        Status.PARTIAL,
        f"empty_content:script_only,{why}",
        f"script_heavy,{why}",
    )
    assert reply.get("DATA") == "# Dashboard\n\nLoading..."


async def test_several_urls_fail_a_placeholder_shell_as_empty_content(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    shell = serve(origin, "/dashboard", _next_shell("Please wait"))
    article = serve(origin, "/article", ARTICLE)
    fields = (("URL", shell), ("URL", article), ("RENDER", "never"))
    reply = await run(make_dispatcher(OPS), "fetch", "CONTENT", None, *fields)
    assert reply.get("FETCH_ERROR") == f"{shell} empty_content:script_only,render_off"


@pytest.mark.parametrize(
    ("placeholder", "scripted"),
    [
        # A sentence past the title is text, even on a page its scripts weigh down.
        ("Tickets for the spring tour go on sale at noon on Friday.", True),
        ("Loading...", False),  # no script: a short page as it was written
    ],
)
async def test_short_text_that_is_no_placeholder_shell_stays_ok(
    make_dispatcher: DispatcherFactory, origin: Origin, placeholder: str, scripted: bool
) -> None:
    html = _next_shell(placeholder)
    if not scripted:
        html = (
            f"<html><head><title>Dashboard</title></head><body><p>{placeholder}</p></body></html>"
        )
    url = serve(origin, "/short", html)
    reply = await fetch(make_dispatcher(OPS), url, ("RENDER", "never"))
    assert (reply.status, reply.get("ERROR")) == (Status.OK, None)


@pytest.mark.parametrize(
    "text",
    [
        "Loading...",
        "# Dashboard\n\nLoading...",
        "# App\n\nPlease wait",
        "# App\n\nJust a moment...",
        "# App\n\nYou need to enable JavaScript to run this app.",
        "# App\n\nThis page requires JavaScript to work properly.",
        "# App\n\nJavaScript is disabled in your browser.",
        "# App\n\nChargement en cours...",
        "# App\n\nBitte warten",
        "# App\n\nCargando...",
        "# App\n\nЗагрузка...",
        "# App\n\n読み込み中...",
        "",
    ],
)
def test_a_placeholder_is_only_loading_or_javascript_wording_past_the_title(text: str) -> None:
    assert is_placeholder(text)


@pytest.mark.parametrize(
    "text",
    [
        "# Subscribed\n\n# Thanks for subscribing!\n\nYou can close this window now.",
        "# Not Found\n\nThe requested URL was not found on this server.",
        "# Quote of the day\n\n> Simplicity is the ultimate sophistication.\n\nLeonardo da Vinci",
        "# Status\n\nAll systems operational.",
        "# Dock\n\nLoading dock opens at nine.",
        "# A title of many words\n\n" + " ".join(["loading"] * PLACEHOLDER_WORDS),
    ],
)
def test_short_real_text_is_no_placeholder(text: str) -> None:
    assert not is_placeholder(text)


# Short real pages with one analytics or app script (review 3): text, not a shell's placeholder.
SHORT_SCRIPTED_PAGES = {
    "thanks": "<html><head><title>Subscribed</title><script async"
    ' src="https://www.googletagmanager.com/gtag/js?id=G-X"></script></head><body>'
    "<h1>Thanks for subscribing!</h1><p>You can close this window now.</p></body></html>",
    "not_found": '<html><head><title>404 Not Found</title><script src="/analytics.js"></script>'
    "</head><body><h1>Not Found</h1><p>The requested URL was not found on this server.</p>"
    "</body></html>",
    "status": '<html><head><title>Status</title><script src="/app.js"></script></head><body>'
    '<div id="app"></div><p>All systems operational.</p></body></html>',
    "quote": '<html><head><title>Quote of the day</title><script src="/x.js"></script></head>'
    "<body><blockquote>Simplicity is the ultimate sophistication.</blockquote>"
    "<p>Leonardo da Vinci</p></body></html>",
}


@pytest.mark.parametrize("name", list(SHORT_SCRIPTED_PAGES))
@pytest.mark.parametrize("render", ["never", "auto"])
async def test_a_short_page_with_one_script_is_read_ok(
    make_dispatcher: DispatcherFactory, origin: Origin, name: str, render: str
) -> None:
    url = serve(origin, "/" + name, SHORT_SCRIPTED_PAGES[name])
    reply = await fetch(make_dispatcher(OPS), url, ("RENDER", render))
    assert (reply.status, reply.get("ERROR")) == (Status.OK, None)
    assert reply.get("DATA")


@pytest.mark.parametrize("name", list(SHORT_SCRIPTED_PAGES))
async def test_a_short_page_with_one_script_is_summarized(
    make_dispatcher: DispatcherFactory, origin: Origin, name: str
) -> None:
    url = serve(origin, "/" + name, SHORT_SCRIPTED_PAGES[name])
    reply = await run(
        make_dispatcher([*SUMMARIZE_OPS, *OPS]), "summarize", "SUMMARY", None, ("URL", url)
    )
    assert reply.status == Status.OK
    assert reply.get_all("BULLET")


@pytest.mark.slow
@pytest.mark.skipif(not DEFAULT_CORPUS.is_dir(), reason="the dev corpora are not beside this clone")
def test_no_dev_corpus_page_told_a_shell_is_taken_for_a_placeholder() -> None:
    """The rule against real pages: every page of both dev corpora that a shell tell holds
    for keeps its text (688 pages; the fewest words past a title among them is 20)."""
    told = []
    for corpus in DEFAULT_CORPORA:
        for path in sorted((corpus / "html").iterdir()):
            data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            reading = read_page(decode_body(data, declared=None, html=True), "https://a.test/")
            if reading.shell is not None:
                told.append((path.name, is_placeholder(reading.article.markdown)))
    assert len(told) >= 5
    assert [name for name, placeholder in told if placeholder] == []


async def test_render_always_without_chromium_fails_before_any_load(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/app", SHELL)
    reply = await fetch(make_dispatcher(OPS), url, ("RENDER", "always"))
    assert reply == Reply(
        Status.FAIL,
        (
            ("SCOPE", "[]"),
            ("DATA", "none"),
            ("ERROR", "browser_unavailable:render_always"),
            ("URL", url),
        ),
    )
    assert hits(origin, "/app") == 0


async def test_a_render_mode_outside_the_three_is_refused(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    reply = await fetch(make_dispatcher(OPS), serve(origin, "/app", SHELL), ("RENDER", "maybe"))
    assert (reply.status, reply.get("ERROR")) == (
        Status.FAIL,
        "invalid_field:RENDER must be auto|never|always",
    )


async def test_render_with_a_file_key_is_refused_as_max_age_is(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    dispatcher = make_dispatcher(OPS)
    key = (await fetch(dispatcher, serve(origin, "/app", SHELL))).get("FILE_KEY")
    assert key is not None
    reply = await run(dispatcher, "fetch", "CONTENT", None, ("FILE_KEY", key), ("RENDER", "never"))
    assert (reply.status, reply.get("ERROR")) == (
        Status.FAIL,
        "invalid_field:RENDER applies to URL: a FILE_KEY is fixed",
    )


class TestTheSettingsMode:
    @pytest.fixture
    def web_config(self, web_config: Config) -> Config:
        fetch_config = replace(web_section(web_config).fetch, render="never")
        return with_section(web_config, "web", replace(web_section(web_config), fetch=fetch_config))

    async def test_web_fetch_render_never_is_the_default_mode(
        self, make_dispatcher: DispatcherFactory, origin: Origin
    ) -> None:
        url = serve(origin, "/app", SHELL)
        reply = await fetch(make_dispatcher(OPS), url)
        assert reply.get("RENDER_REASON") == "root_div,render_off"
        assert FetchConfig().render == "auto"
