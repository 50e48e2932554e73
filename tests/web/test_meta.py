"""The meta op: a page's card from its head, each field from its first source (OpenGraph,
Twitter cards, JSON-LD, then <title> and the meta description)."""

from __future__ import annotations

import json

import pytest

from protocol import Reply, Status
from specialists.web.pages.headmeta import head_slice, read_head, refresh_target
from specialists.web.pages.ops_fetch import OPS
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply
from tests.web.conftest import DispatcherFactory
from tests.web.pages_support import ARTICLE, run, serve

BASE = "https://origin.test/posts/1"
OPEN_GRAPH = """<html><head>
<meta property="og:title" content="OG title">
<meta property="og:description" content="OG  description
  across lines">
<meta property="og:image" content="/img/card.png">
<meta property="og:url" content="https://origin.test/canonical">
<meta property="og:site_name" content="Coast News">
<meta property="og:type" content="article">
<meta name="twitter:title" content="Twitter title">
<title>Plain title</title>
</head><body><meta property="og:title" content="a body tag is never read"></body></html>"""
TWITTER = """<html><head><title>Plain title</title>
<meta name="twitter:title" content="Twitter title">
<meta name="twitter:description" content="Twitter description">
<meta name="twitter:image" content="https://cdn.test/t.png">
</head><body></body></html>"""
JSON_LD = {
    "@context": "https://schema.org",
    "@graph": [
        {"@type": "WebSite", "name": "Coast News", "url": "https://origin.test/"},
        {
            "@type": "NewsArticle",
            "headline": "LD headline",
            "description": "LD description",
            "image": [{"@type": "ImageObject", "url": "https://cdn.test/ld.png"}],
        },
    ],
}
LD_PAGE = (
    "<html><head><title>Plain title</title>"
    '<script type="application/ld+json">{"broken": </script>'
    f'<script type="application/ld+json">{json.dumps(JSON_LD)}</script>'
    "</head><body></body></html>"
)
PLAIN = (
    '<html><head><title> Plain   title </title><meta name="description" content="Plain '
    'description"></head><body><p>Body text.</p></body></html>'
)


async def meta(dispatcher_factory: DispatcherFactory, url: str) -> Reply:
    return await run(dispatcher_factory(OPS), "meta", "META", url)


async def test_meta_reads_every_opengraph_field_from_the_head(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/og", OPEN_GRAPH)
    reply = await meta(make_dispatcher, url)
    assert reply == Reply(
        Status.OK,
        (
            ("SCOPE", "[origin.test]"),
            ("DATA", f"url:{url}"),
            ("TITLE", "OG title"),
            ("DESCRIPTION", "OG description across lines"),
            ("IMAGE", origin.url("origin.test", "/img/card.png")),
            ("SITE_NAME", "Coast News"),
            ("TYPE", "article"),
            ("OG_URL", "https://origin.test/canonical"),
            ("CITE", f'{url} "OG title"'),
        ),
    )


async def test_meta_falls_back_to_twitter_cards(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    reply = await meta(make_dispatcher, serve(origin, "/tw", TWITTER))
    assert reply.fields[2:-1] == (
        ("TITLE", "Twitter title"),
        ("DESCRIPTION", "Twitter description"),
        ("IMAGE", "https://cdn.test/t.png"),
    )


async def test_meta_falls_back_to_json_ld_and_skips_a_broken_block(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    reply = await meta(make_dispatcher, serve(origin, "/ld", LD_PAGE))
    assert reply.fields[2:-1] == (
        ("TITLE", "LD headline"),
        ("DESCRIPTION", "LD description"),
        ("IMAGE", "https://cdn.test/ld.png"),
        ("SITE_NAME", "Coast News"),
    )


async def test_meta_falls_back_to_the_title_and_meta_description(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/plain", PLAIN)
    reply = await meta(make_dispatcher, url)
    assert reply.fields[1:] == (
        ("DATA", f"url:{url}"),
        ("TITLE", "Plain title"),
        ("DESCRIPTION", "Plain description"),
        ("CITE", f'{url} "Plain title"'),
    )


async def test_meta_of_a_page_with_no_head_data_sends_only_data_and_cite(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/bare", "<p>nothing here</p>")
    reply = await meta(make_dispatcher, url)
    assert reply.fields == (
        ("SCOPE", "[origin.test]"),
        ("DATA", f"url:{url}"),
        ("CITE", f'{url} ""'),
    )


async def test_meta_honours_robots_txt(make_dispatcher: DispatcherFactory, origin: Origin) -> None:
    origin.robots = OriginReply(200, [], b"User-agent: *\nDisallow: /og")
    reply = await meta(make_dispatcher, serve(origin, "/og", OPEN_GRAPH))
    assert reply.get("ERROR") == "robots_disallowed:disallowed_by_rules"


async def test_meta_of_an_image_is_unsupported_content(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    reply = await meta(make_dispatcher, serve(origin, "/i.png", b"\x89PNG", "image/png"))
    assert reply.get("ERROR") == "unsupported_content:image/png"


async def test_meta_after_fetch_reads_the_same_cached_snapshot(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    dispatcher = make_dispatcher(OPS)
    url = serve(origin, "/tides", ARTICLE)
    await run(dispatcher, "fetch", "CONTENT", url)
    reply = await run(dispatcher, "meta", "META", url)
    assert reply.get("TITLE") == "Tides of the North Sea | Coast News"
    assert origin.paths().count("/tides") == 1


def test_head_slice_stops_at_the_end_of_the_head_or_the_start_of_the_body() -> None:
    assert head_slice("<head><title>t</title></HEAD ><body>x") == "<head><title>t</title>"
    assert head_slice("<title>t</title><BODY class=a>x") == "<title>t</title>"
    assert head_slice("<title>t</title>") == "<title>t</title>"


def test_a_head_without_an_end_is_read_up_to_the_scan_limit() -> None:
    filler = "<meta name=x content=y>" * 20_000
    head = read_head(f"<head>{filler}<meta property='og:title' content='late'>", base_url=BASE)
    assert "title" not in head.meta  # past HEAD_SCAN_CHARS: the rest is not the head


@pytest.mark.parametrize(
    ("content", "target"),
    [
        ("0; url=https://other.test/a", "https://other.test/a"),
        ("0;URL='/relative?q=1'", "https://origin.test/relative?q=1"),
        ('5, url="next"', "https://origin.test/posts/next"),
        ("0; https://other.test/b", "https://other.test/b"),
        ("30", None),
        ("0; url=javascript:alert(1)", None),
    ],
)
def test_refresh_targets_follow_whatwg_declarative_refresh(
    content: str, target: str | None
) -> None:
    assert refresh_target(content, BASE) == target


def test_json_ld_types_that_describe_the_site_never_give_the_title() -> None:
    graph = [{"@type": "Organization", "name": "Org"}, {"@type": ["WebPage"], "name": "Page"}]
    html = f'<head><script type="application/ld+json">{json.dumps(graph)}</script></head>'
    assert read_head(html, base_url=BASE).meta == {"title": "Page", "site_name": "Org"}
