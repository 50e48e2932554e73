"""REQ:api end to end against a local stand-in for the GitHub API that answers in GitHub's
recorded JSON shapes: credentials, caching, redirects, errors and rate limits."""

from __future__ import annotations

import json
import ssl
import time
import urllib.parse
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from csp_web.app.catalog import config_sections
from csp_web.config import Config, with_section
from csp_web.config.load import config_from_mapping
from csp_web.infra.ratelimit import Bucket
from protocol import Status
from specialists.web.config import ApiConfig, RateConfig, web_section
from specialists.web.pages.ops_api import OPS
from tests.harness import outbox_of
from tests.net._dns import FixedResolver
from tests.net._origin import Origin, Reply, Seen
from tests.web.fixtures import load, open_web_dispatcher, run, serve, web_audits

WAIT_S = 10.0
TOKEN_ENV = "TEST_GH_TOKEN"
TOKEN = "ghp_testtoken0123456789abcdefABCDEF0123"
GITHUB_HEADERS = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


def with_github(config: Config, origin: Origin, **changes: Any) -> Config:
    """``config`` whose only API is ``github``, served by ``origin`` as api.test."""
    github = ApiConfig(
        origin.url("api.test", "/"), auth_env=TOKEN_ENV, headers=dict(GITHUB_HEADERS)
    )
    apis = {"github": replace(github, **changes)}
    return with_section(config, "web", replace(web_section(config), apis=apis))


def api_fields(endpoint: str, *more: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    return (("ENDPOINT", endpoint), *more)


def requests_to(origin: Origin, path: str) -> list[Seen]:
    return [seen for seen in origin.requests if urllib.parse.urlsplit(seen.target).path == path]


async def test_get_returns_compact_json_with_status_and_citation(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/repos/python-trio/trio"] = serve("github_repo.json")
    config = with_github(web_config, origin)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(
                dispatcher, "api", "API_RESPONSE", *api_fields("github:repos/python-trio/trio")
            )
    expected = json.dumps(
        json.loads(load("github_repo.json")), ensure_ascii=False, separators=(",", ":")
    )
    assert reply.status is Status.OK
    assert reply.fields == (
        ("SCOPE", "[api.test]"),
        ("DATA", expected),
        ("STATUS_CODE", "200"),
        ("CACHED", "false"),
        (
            "CITE",
            f'{origin.url("api.test", "/repos/python-trio/trio")} "github:repos/python-trio/trio"',
        ),
    )
    (seen,) = origin.requests
    assert seen.method == "GET"
    assert seen.headers["authorization"] == f"Bearer {TOKEN}"
    assert seen.headers["accept"] == "application/vnd.github+json"
    assert seen.headers["x-github-api-version"] == "2022-11-28"


async def test_each_api_call_takes_one_of_the_tasks_fetches(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    """An API call is a page the task asks for (SPEC D-3): fetches:1 allows one call, the
    next is refused before any request."""
    origin.routes["/repos/python-trio/trio"] = serve("github_repo.json")
    config = with_github(web_config, origin)
    fields = (*api_fields("github:repos/python-trio/trio"), ("NO_CACHE", "true"))
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            at = await run(dispatcher, "api", "API_RESPONSE", *fields, ("BUDGET", "fetches:1"))
            over = await run(dispatcher, "api", "API_RESPONSE", *fields, ("BUDGET", "fetches:0"))
    assert (at.status, at.get("BUDGET_LEFT")) == (Status.OK, "fetches:0")
    assert (over.status, over.get("ERROR")) == (Status.PARTIAL, "budget_exhausted:fetches")
    assert len(origin.requests) == 1


async def test_endpoint_may_come_as_inline_text(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    from csp_web.core.api.context import Peer
    from protocol import Task

    origin.routes["/repos/python-trio/trio"] = serve("github_repo.json")
    config = with_github(web_config, origin)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        task = Task("api", "WEB", "API_RESPONSE", "github:repos/python-trio/trio")
        with trio.fail_after(WAIT_S):
            reply = await dispatcher.run(task, Peer("test"))
    assert reply.get("STATUS_CODE") == "200"


async def test_get_is_cached_and_a_write_invalidates_the_apis_cache(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/repos/python-trio/trio"] = serve("github_repo.json")
    origin.routes["/repos/python-trio/trio/issues"] = serve("github_issue_created.json", 201)
    config = with_github(web_config, origin)
    repo = api_fields("github:repos/python-trio/trio")
    issue = api_fields(
        "github:repos/python-trio/trio/issues",
        ("METHOD", "POST"),
        ("PAYLOAD", '{"title": "Found a bug", "body": "I\'m having a problem with this."}'),
    )
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            first = await run(dispatcher, "api", "API_RESPONSE", *repo)
            second = await run(dispatcher, "api", "API_RESPONSE", *repo)
            created = await run(dispatcher, "api", "API_RESPONSE", *issue)
            third = await run(dispatcher, "api", "API_RESPONSE", *repo)
            forced = await run(dispatcher, "api", "API_RESPONSE", *repo, ("NO_CACHE", "true"))
        records = [json.loads(data) for data in web_audits(dispatcher)]
    assert [r.get("CACHED") for r in (first, second, created, third, forced)] == [
        "false",
        "true",
        "false",
        "false",
        "false",
    ]
    assert second.get("DATA") == first.get("DATA")
    assert created.get("STATUS_CODE") == "201"
    (post,) = [seen for seen in origin.requests if seen.method == "POST"]
    assert json.loads(post.body) == {
        "title": "Found a bug",
        "body": "I'm having a problem with this.",
    }
    assert post.headers["content-type"] == "application/json"
    assert len(requests_to(origin, "/repos/python-trio/trio")) == 3
    assert [(r["target"], r["cache_hit"], r["status_code"]) for r in records] == [
        ("github:repos/python-trio/trio", False, 200),
        ("github:repos/python-trio/trio", True, 200),
        ("github:repos/python-trio/trio/issues", False, 201),
        ("github:repos/python-trio/trio", False, 200),
        ("github:repos/python-trio/trio", False, 200),
    ]


async def test_an_api_whose_cache_ttl_is_zero_is_never_cached(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    """``cache_ttl_s: 0`` turns one API's cache off (an API whose answers must be fresh):
    every GET reaches the origin, and the config loader takes the zero."""
    origin.routes["/repos/python-trio/trio"] = serve("github_repo.json")
    config = with_github(web_config, origin, cache_ttl_s=0.0)
    repo = api_fields("github:repos/python-trio/trio")
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            replies = [await run(dispatcher, "api", "API_RESPONSE", *repo) for _ in range(2)]
    assert [reply.get("CACHED") for reply in replies] == ["false", "false"]
    assert len(requests_to(origin, "/repos/python-trio/trio")) == 2
    apis = {"x": {"base_url": "https://a.test/", "cache_ttl_s": 0}}
    loaded = config_from_mapping({"web": {"apis": apis}}, sections=config_sections())
    assert web_section(loaded).apis["x"].cache_ttl_s == 0


async def test_401_replies_in_the_seed_error_form(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    """R-2: the seed's api error form, ENDPOINT after ERROR."""
    origin.routes["/repos/private/repo"] = serve("github_bad_credentials.json", 401)
    config = with_github(web_config, origin)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(
                dispatcher, "api", "API_RESPONSE", *api_fields("github:repos/private/repo")
            )
    assert reply.status is Status.FAIL
    assert reply.fields == (
        ("SCOPE", "[]"),
        ("DATA", "none"),
        ("ERROR", "api_error:401_unauthorized"),
        ("ENDPOINT", "github:repos/private/repo"),
        ("STATUS_CODE", "401"),
        ("SUMMARY", "Bad credentials"),
    )


async def test_404_is_api_error_not_found_and_not_cached(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/repos/nobody/nothing"] = serve("github_not_found.json", 404)
    config = with_github(web_config, origin)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            for _ in range(2):
                reply = await run(
                    dispatcher, "api", "API_RESPONSE", *api_fields("github:repos/nobody/nothing")
                )
    assert reply.get("ERROR") == "api_error:404_not_found"
    assert reply.get("SUMMARY") == "Not Found"
    assert len(origin.requests) == 2


async def test_unknown_api_is_refused_before_any_request(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    config = with_github(web_config, origin)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        reply = await run(dispatcher, "api", "API_RESPONSE", *api_fields("gitlab:projects/1"))
        records = [json.loads(data) for data in web_audits(dispatcher)]
    assert reply.fields[2:] == (("ERROR", "unknown_api:gitlab"), ("ENDPOINT", "gitlab:projects/1"))
    assert origin.requests == []
    assert [(r["op"], r["outcome"], r["error"]) for r in records] == [
        ("api", "FAIL", "unknown_api:gitlab")
    ]


@pytest.mark.parametrize(
    "endpoint",
    [
        "github:../admin",
        "github:repos/../../admin",
        "github:repos/%2e%2e/%2E%2E/admin",
        "github:repos/.%2e/x",
        "github:repos/..;/..;/admin",
        "github://other.test/steal",
        "github:repos\\..\\x",
        "github:repos/x#frag",
        "github:repos/x y",
        "github",
        ":repos/x",
    ],
)
async def test_endpoint_path_must_stay_under_the_base_url(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext, endpoint: str
) -> None:
    config = with_github(web_config, origin)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        reply = await run(dispatcher, "api", "API_RESPONSE", *api_fields(endpoint))
    assert (reply.get("ERROR") or "").startswith("invalid_field:")
    assert reply.get("ENDPOINT") == endpoint
    assert origin.requests == []


async def test_base_url_with_a_path_keeps_calls_under_it(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/v1/models"] = lambda seen: Reply(
        200, [("content-type", "application/json")], b'{"data":[]}'
    )
    config = with_github(web_config, origin, base_url=origin.url("api.test", "/v1"))
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            ok = await run(dispatcher, "api", "API_RESPONSE", *api_fields("github:/models"))
            escape = await run(
                dispatcher, "api", "API_RESPONSE", *api_fields("github:../v2/models")
            )
    assert (ok.get("DATA"), (escape.get("ERROR") or "").partition(":")[0]) == (
        '{"data":[]}',
        "invalid_field",
    )
    assert origin.paths() == ["/v1/models"]


@pytest.mark.parametrize(
    "header",
    [
        "Authorization: Bearer other",
        "cookie:a=b",
        "Host: other.test",
        "PROXY-AUTHORIZATION:x",
        "no colon here",
        "Bad Name:x",
        "X-A: b\r\nX-Injected: 1",
        "X-A: b\nX-Injected: 1",
        "X-A: nul\x00",
        "X-A: caf\u00e9",
    ],
)
async def test_headers_may_not_carry_credentials_or_routing(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext, header: str
) -> None:
    config = with_github(web_config, origin)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        reply = await run(
            dispatcher, "api", "API_RESPONSE", *api_fields("github:user", ("HEADERS", header))
        )
    assert (reply.get("ERROR") or "").startswith("invalid_field:")
    assert origin.requests == []


async def test_the_apis_own_auth_header_is_refused_too(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    config = with_github(web_config, origin, auth_header="X-Api-Key", auth_scheme="")
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        reply = await run(
            dispatcher,
            "api",
            "API_RESPONSE",
            *api_fields("github:user", ("HEADERS", "x-api-key: k")),
        )
    assert reply.get("ERROR") == "invalid_field:HEADERS may not set x-api-key"


async def test_repeated_headers_fields_are_sent_and_key_rides_bare_without_scheme(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/user"] = serve("github_repo.json")
    config = with_github(web_config, origin, auth_header="X-Api-Key", auth_scheme="")
    fields = api_fields(
        "github:user", ("HEADERS", "X-Trace: abc"), ("HEADERS", "accept:text/plain")
    )
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(dispatcher, "api", "API_RESPONSE", *fields)
    assert reply.status is Status.OK
    (seen,) = origin.requests
    assert (seen.headers["x-trace"], seen.headers["accept"]) == ("abc", "text/plain")
    assert seen.headers["x-api-key"] == TOKEN
    assert "authorization" not in seen.headers


async def test_payload_with_get_is_refused(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    config = with_github(web_config, origin)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        reply = await run(
            dispatcher, "api", "API_RESPONSE", *api_fields("github:user", ("PAYLOAD", "{}"))
        )
    assert (reply.get("ERROR") or "").startswith("invalid_field:")


async def test_a_payload_naming_a_key_twice_is_refused_before_any_request(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    """json keeps the last of a repeated key silently (review nit): refused, nested too."""
    origin.routes["/repos/o/r/issues"] = serve("github_repo.json")
    config = with_github(web_config, origin)
    payload = ("PAYLOAD", '{"title":"t","labels":{"x":1,"x":2}}')
    fields = api_fields("github:repos/o/r/issues", ("METHOD", "POST"), payload)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        reply = await run(dispatcher, "api", "API_RESPONSE", *fields)
    assert reply.get("ERROR") == 'invalid_field:PAYLOAD repeats the key "x"'
    assert origin.requests == []


async def test_redirect_is_refused_while_credentials_are_attached(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    elsewhere = origin.url("other.test", "/collect")
    origin.routes["/repos/old/name"] = lambda seen: Reply(301, [("location", elsewhere)])
    config = with_github(web_config, origin)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(
                dispatcher, "api", "API_RESPONSE", *api_fields("github:repos/old/name")
            )
    assert reply.fields[2:] == (
        ("ERROR", "api_error:redirect_refused"),
        ("ENDPOINT", "github:repos/old/name"),
    )
    assert origin.paths() == ["/repos/old/name"]


async def test_without_credentials_a_redirect_is_followed(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(TOKEN_ENV)
    origin.routes["/repos/old/name"] = lambda seen: Reply(
        301, [("location", "/repos/python-trio/trio")]
    )
    origin.routes["/repos/python-trio/trio"] = serve("github_repo.json")
    config = with_github(web_config, origin)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(
                dispatcher, "api", "API_RESPONSE", *api_fields("github:repos/old/name")
            )
    assert reply.get("STATUS_CODE") == "200"
    assert all("authorization" not in seen.headers for seen in origin.requests)


async def test_a_payload_with_a_lone_surrogate_is_invalid_field_and_sends_nothing(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    """V-2 for a JSON field: the body's encode raised (internal_error, a traceback)."""
    config = with_github(web_config, origin)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            fields = api_fields("github:gists", ("METHOD", "POST"), ("PAYLOAD", '{"a":"\\ud800"}'))
            reply = await run(dispatcher, "api", "API_RESPONSE", *fields)
    assert reply.status is Status.FAIL
    assert reply.fields == (
        ("SCOPE", "[]"),
        ("DATA", "none"),
        ("ERROR", "invalid_field:PAYLOAD holds a lone surrogate"),
    )
    assert origin.requests == []


async def test_credentials_go_only_to_the_api_host_and_never_to_disk_or_replies(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    origin.routes["/repos/python-trio/trio"] = serve("github_repo.json")
    origin.routes["/repos/old/name"] = lambda seen: Reply(
        302, [("location", origin.url("other.test", "/collect"))]
    )
    config = with_github(web_config, origin)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            replies = [
                await run(dispatcher, "api", "API_RESPONSE", *api_fields(endpoint))
                for endpoint in (
                    "github:repos/python-trio/trio",
                    "github:repos/python-trio/trio",
                    "github:repos/old/name",
                    "github:echo",
                )
            ]
        writes = [write for _, write in outbox_of(dispatcher)._store.oldest(1000)]
    carried = [seen for seen in origin.requests if "authorization" in seen.headers]
    assert carried
    assert all(seen.headers["host"].startswith("api.test:") for seen in carried)
    assert all(TOKEN not in value for reply in replies for _, value in reply.fields)
    echoed = json.loads(replies[3].get("DATA") or "")  # the origin's /echo shows our headers
    assert echoed["headers"]["authorization"] == "Bearer [redacted]"
    assert writes
    assert not any(TOKEN in write.data for write in writes)
    for directory in (Path(config.cache_dir), Path(config.outbox_path).parent):
        for path in directory.rglob("*"):
            if path.is_file():
                assert TOKEN.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("status", [200, 401])
async def test_a_token_echoed_in_another_letter_case_is_redacted_too(
    status: int, web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    def shout(seen: Seen) -> Reply:
        said = seen.headers["authorization"].upper()
        body = json.dumps({"message": f"you sent {said}", "lower": said.lower()}).encode()
        return Reply(status, [("content-type", "application/json")], body)

    origin.routes["/shout"] = shout
    config = with_github(web_config, origin)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(dispatcher, "api", "API_RESPONSE", *api_fields("github:shout"))
    assert reply.status is (Status.OK if status == 200 else Status.FAIL)
    assert "[redacted]" in str(reply.fields)
    assert TOKEN.lower() not in str(reply.fields).lower()


async def test_large_response_is_truncated_with_a_note(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext
) -> None:
    items = [{"id": n, "name": f"repo-{n:04d}"} for n in range(400)]
    body = json.dumps(items).encode()
    origin.routes["/orgs/big/repos"] = lambda seen: Reply(
        200, [("content-type", "application/json; charset=utf-8")], body
    )
    config = with_github(web_config, origin)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(
                dispatcher, "api", "API_RESPONSE", *api_fields("github:orgs/big/repos")
            )
    compact = json.dumps(items, separators=(",", ":"))
    data = reply.get("DATA") or ""
    assert data == compact[:4000] + f"…[truncated: {len(compact)} chars]"
    assert reply.get("TRUNCATED") == str(len(compact))


async def test_429_pauses_the_bucket_and_retries_once_when_the_pause_ends_in_time(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    mock_clock: trio.testing.MockClock,
) -> None:
    answers = [
        Reply(
            429,
            [("content-type", "application/json"), ("retry-after", "2")],
            load("github_rate_limited.json"),
        ),
        Reply(200, [("content-type", "application/json")], load("github_repo.json")),
    ]
    origin.routes["/repos/python-trio/trio"] = lambda seen: answers.pop(0)
    config = with_github(web_config, origin)
    replies = []
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, web):
        bucket = web.limits.bucket("api:github")
        assert isinstance(bucket, Bucket)  # local mode: its wait is readable

        async def call() -> None:
            replies.append(
                await run(
                    dispatcher, "api", "API_RESPONSE", *api_fields("github:repos/python-trio/trio")
                )
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            while not origin.requests or bucket.wait_s() == 0:
                await trio.testing.wait_all_tasks_blocked()
            assert bucket.wait_s() == 2
            mock_clock.jump(2)
    assert replies[0].get("STATUS_CODE") == "200"
    assert len(origin.requests) == 2


async def test_second_429_replies_rate_limited_with_retry_after(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    mock_clock: trio.testing.MockClock,
) -> None:
    limited = serve("github_rate_limited.json", 429, [("retry-after", "1")])
    origin.routes["/user"] = limited
    config = with_github(web_config, origin)
    replies = []
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, web):
        bucket = web.limits.bucket("api:github")
        assert isinstance(bucket, Bucket)  # local mode: its wait is readable

        async def call() -> None:
            replies.append(await run(dispatcher, "api", "API_RESPONSE", *api_fields("github:user")))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            while not origin.requests or bucket.wait_s() == 0:
                await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(1)
    assert len(origin.requests) == 2
    assert replies[0].fields[2:] == (
        ("ERROR", "rate_limited:github"),
        ("ENDPOINT", "github:user"),
        ("RETRY_AFTER", "1"),
    )


@pytest.mark.parametrize(
    "headers",
    [
        [("retry-after", "120")],
        # GitHub's primary limit: 403 with nothing left until the reset time (a Unix time).
        [
            ("x-ratelimit-limit", "5000"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-used", "5000"),
            ("x-ratelimit-resource", "core"),
        ],
    ],
)
async def test_rate_limit_beyond_the_deadline_replies_rate_limited_at_once(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    headers: list[tuple[str, str]],
) -> None:
    status = 429 if headers[0][0] == "retry-after" else 403
    reset = [("x-ratelimit-reset", str(int(time.time()) + 120))] if status == 403 else []
    origin.routes["/user"] = serve("github_rate_limited.json", status, [*headers, *reset])
    config = with_github(web_config, origin)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(dispatcher, "api", "API_RESPONSE", *api_fields("github:user"))
    assert reply.get("ERROR") == "rate_limited:github"
    assert 115 <= int(reply.get("RETRY_AFTER") or 0) <= 120
    assert len(origin.requests) == 1


@pytest.mark.parametrize(("calls", "error"), [(2, None), (3, "rate_limited")])
async def test_api_bucket_allows_its_burst_then_refuses(
    web_config: Config,
    origin: Origin,
    dns: FixedResolver,
    trust: ssl.SSLContext,
    mock_clock: trio.testing.MockClock,
    calls: int,
    error: str | None,
) -> None:
    origin.routes["/user"] = serve("github_repo.json")
    config = with_github(web_config, origin, rate=RateConfig(1, 2))
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        replies = [
            await run(
                dispatcher, "api", "API_RESPONSE", *api_fields("github:user", ("NO_CACHE", "true"))
            )
            for _ in range(calls)
        ]
    last = replies[-1]
    assert ((last.get("ERROR") or "").partition(":")[0] or None) == error
    if error:
        assert last.get("RETRY_AFTER") == "60"
    assert len(origin.requests) == 2


@pytest.mark.parametrize("status", [200, 500])
async def test_json_nested_past_what_json_reads_is_answered_as_its_text(
    web_config: Config, origin: Origin, dns: FixedResolver, trust: ssl.SSLContext, status: int
) -> None:
    """json.loads raised RecursionError on it: internal_error with a traceback. It is an
    answer that is not JSON we read, so its text, as for any invalid JSON."""
    body = b"[" * 100_000 + b"]" * 100_000
    origin.routes["/deep"] = lambda seen: Reply(
        status, [("content-type", "application/json")], body
    )
    config = with_github(web_config, origin)
    async with open_web_dispatcher(config, OPS, dns=dns, trust=trust) as (dispatcher, _):
        with trio.fail_after(WAIT_S):
            reply = await run(dispatcher, "api", "API_RESPONSE", *api_fields("github:deep"))
    if status == 200:
        assert reply.status is Status.OK
        assert reply.get("DATA") == "[" * 4000 + f"…[truncated: {len(body)} chars]"
    else:
        assert (reply.status, reply.get("ERROR")) == (
            Status.FAIL,
            "api_error:500_internal_server_error",
        )
        assert set(reply.get("SUMMARY") or "") == {"["}  # the start of the body
