"""The resolve op: HTTP redirects and meta refreshes, every hop through the guard and robots.txt,
at most guard.max_redirects (3) hops in all."""

from __future__ import annotations

from protocol import Reply, Status
from specialists.web.pages.ops_fetch import OPS
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply
from tests.web.conftest import DispatcherFactory
from tests.web.pages_support import ARTICLE, run, serve

ARROW = "\u2192"


def redirect(origin: Origin, path: str, to: str) -> str:
    origin.routes[path] = lambda _seen: OriginReply(302, [("location", to)])
    return origin.url("origin.test", path)


def refresh_page(origin: Origin, path: str, content: str) -> str:
    head = f'<html><head><meta http-equiv="Refresh" content="{content}"></head><body></body></html>'
    return serve(origin, path, head)


async def resolve(dispatcher_factory: DispatcherFactory, url: str) -> Reply:
    return await run(dispatcher_factory(OPS), "resolve", "URL", url)


async def test_resolve_follows_two_redirects_and_a_meta_refresh(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    final = serve(origin, "/final", ARTICLE)
    refresh = refresh_page(origin, "/refresh", "0; url=/final")
    second = redirect(origin, "/r2", "/refresh")
    first = redirect(origin, "/r1", second)
    reply = await resolve(make_dispatcher, first)
    assert reply == Reply(
        Status.OK,
        (
            ("SCOPE", "[origin.test]"),
            ("DATA", f"url:{final}"),
            ("REDIRECT_CHAIN", ARROW.join([first, second, refresh, final])),
        ),
    )


async def test_a_fourth_hop_is_too_many_redirects(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    serve(origin, "/final", ARTICLE)
    refresh_page(origin, "/refresh", "0; url=/final")
    redirect(origin, "/r3", "/refresh")
    redirect(origin, "/r2", "/r3")
    first = redirect(origin, "/r1", "/r2")
    reply = await resolve(make_dispatcher, first)
    assert (reply.get("ERROR"), reply.get("URL")) == ("too_many_redirects:max_3", first)
    assert "/final" not in origin.paths()  # refused before the fourth hop was requested


async def test_http_redirects_alone_are_capped_by_the_client_at_the_same_limit(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    three = await resolve(make_dispatcher, origin.url("origin.test", "/chain/3"))
    four = await resolve(make_dispatcher, origin.url("origin.test", "/chain/4"))
    assert three.get("DATA") == f"url:{origin.url('origin.test', '/chain/0')}"
    assert len((three.get("REDIRECT_CHAIN") or "").split(ARROW)) == 4
    assert four.get("ERROR") == "too_many_redirects:max_3"


async def test_a_page_without_redirects_resolves_to_itself(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = serve(origin, "/final", ARTICLE)
    reply = await resolve(make_dispatcher, url)
    assert (reply.get("DATA"), reply.get("REDIRECT_CHAIN")) == (f"url:{url}", url)


async def test_a_refresh_to_the_page_itself_is_a_reload_not_a_hop(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    url = refresh_page(origin, "/clock", "30; url=/clock#top")
    reply = await resolve(make_dispatcher, url)
    assert (reply.get("DATA"), reply.get("REDIRECT_CHAIN")) == (f"url:{url}", url)


async def test_resolve_names_every_host_of_the_chain_in_scope(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    final = serve(origin, "/final", ARTICLE).replace("origin.test", "other.test")
    reply = await resolve(make_dispatcher, redirect(origin, "/out", final))
    assert (reply.get("SCOPE"), reply.get("DATA")) == ("[origin.test,other.test]", f"url:{final}")


async def test_resolve_to_a_private_address_is_ssrf_blocked(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    inside = origin.url("private.test", "/admin")
    reply = await resolve(make_dispatcher, redirect(origin, "/out", inside))
    assert (reply.get("ERROR") or "").startswith("ssrf_blocked:")
    assert "10.0.0.1" not in str(reply.fields)
    assert "/admin" not in origin.paths()


async def test_a_meta_refresh_to_a_private_address_is_ssrf_blocked(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    inside = origin.url("private.test", "/admin")
    reply = await resolve(make_dispatcher, refresh_page(origin, "/go", f"0; url={inside}"))
    assert (reply.get("ERROR") or "").startswith("ssrf_blocked:")


async def test_a_meta_refresh_to_a_disallowed_path_is_refused_by_robots(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    origin.robots = OriginReply(200, [], b"User-agent: *\nDisallow: /final")
    serve(origin, "/final", ARTICLE)
    reply = await resolve(make_dispatcher, refresh_page(origin, "/go", "0; url=/final"))
    assert reply.get("ERROR") == "robots_disallowed:disallowed_by_rules"
    assert "/final" not in origin.paths()


async def test_a_second_resolve_is_answered_from_the_cache(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    dispatcher = make_dispatcher(OPS)
    serve(origin, "/final", ARTICLE)
    url = redirect(origin, "/r1", "/final")
    first = await run(dispatcher, "resolve", "URL", url)
    second = await run(dispatcher, "resolve", "URL", url)
    assert first == second
    assert origin.paths().count("/r1") == 1


def test_the_op_table_names_the_arrow_the_chain_is_joined_with() -> None:
    """REQ:ops (and docs/ops.md, made from it) say REDIRECT_CHAIN's hops are joined by the
    arrow the replies carry, U+2192; the table said ' -> '."""
    [resolve_op] = [op for op in OPS if op.req == "resolve"]
    [chain] = [field for field in resolve_op.replies if field.name == "REDIRECT_CHAIN"]
    assert ARROW in chain.doc
    assert "->" not in chain.doc


async def test_a_refused_meta_refresh_answers_the_url_asked_not_the_hop(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """docs/ops.md: resolve's FAIL ``URL`` is the URL asked, as fetch's; a refresh hop the
    guard, robots.txt or its origin refused is not put there (nor anywhere in the reply)."""
    inside = origin.url("private.test", "/admin")
    origin.robots = OriginReply(200, [], b"User-agent: *\nDisallow: /final")
    cases = {
        "/to-private": (f"0; url={inside}", "ssrf_blocked:"),
        "/to-robots": ("0; url=/final", "robots_disallowed:"),
        "/to-missing": ("0; url=/status/404", "fetch_failed:http_404"),
    }
    for path, (content, code) in cases.items():
        asked = refresh_page(origin, path, content)
        reply = await resolve(make_dispatcher, asked)
        assert reply.status is Status.FAIL
        assert (reply.get("ERROR") or "").startswith(code), reply
        assert reply.get_all("URL") == [asked], reply
        assert inside not in str(reply.fields)
        assert "/final" not in str(reply.fields)
