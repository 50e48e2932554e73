"""A URL's userinfo (``user:password@``) is refused (``url_rejected:userinfo``) and kept
nowhere: not in the reply, the op's audit record or any other memory write, any file under
the state dir, or a log line. Every web op that takes a URL, or text that may hold one
(search's QUERY, research's QUESTION), is asked with one."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import pytest
import trio
import trio.testing

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.memory.outbox import open_outbox
from protocol import Reply, Status
from specialists.web import WEB
from specialists.web.config import web_section
from specialists.web.services import WebServices
from tests.harness import build_dispatcher, files_holding, outbox_of
from tests.net._origin import Origin
from tests.net._origin import Reply as OriginReply
from tests.web.fixtures import run, with_search

PASSWORD = "s3cr3tpw-5eed"
WAIT_S = 20.0
Fields = Callable[[str], tuple[tuple[str, str], ...]]

# (op, OUT, the fields that carry the URL); each URL op is refused url_rejected:userinfo.
URL_OPS: list[tuple[str, str, Fields]] = [
    ("fetch", "CONTENT", lambda url: (("URL", url),)),
    ("meta", "META", lambda url: (("URL", url),)),
    ("resolve", "URL", lambda url: (("URL", url),)),
    ("summarize", "SUMMARY", lambda url: (("URL", url),)),
    ("verify", "VERIFY", lambda url: (("URL", url), ("QUOTE", "tides rise"))),
]
TEXT_OPS: list[tuple[str, str, Fields]] = [
    ("api", "API_RESPONSE", lambda url: (("ENDPOINT", url),)),
    ("search", "URL_REFS", lambda url: (("QUERY", f"what is at {url}"),)),
    ("research", "RESEARCH", lambda url: (("QUESTION", f"what is at {url}?"),)),
]


def with_userinfo(url: str) -> str:
    return url.replace("https://", f"https://user:{PASSWORD}@", 1)


@pytest.fixture
async def dispatcher(
    web_config: Config, web: WebServices, origin: Origin
) -> AsyncIterator[Dispatcher]:
    """Every web op, research's jobs running, search on a SearXNG that finds nothing."""
    body = json.dumps({"query": "q", "number_of_results": 0, "results": []}).encode()
    origin.routes["/searx/search"] = lambda seen: OriginReply(
        headers=[("content-type", "application/json")], body=body
    )
    config = with_search(web_config, origin, order=("searxng",))
    web.config = web_section(config)
    async with (
        open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
        trio.open_nursery() as jobs,
    ):
        await jobs.start(web.jobs.serve, None)
        yield build_dispatcher(config, outbox_path(config, outbox), WEB.ops, web)
        jobs.cancel_scope.cancel()


async def test_a_urls_password_is_refused_and_kept_nowhere_by_any_web_op(
    dispatcher: Dispatcher,
    web_config: Config,
    origin: Origin,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("DEBUG")
    url = with_userinfo(origin.url("origin.test", "/page"))
    replies: dict[str, Reply] = {}
    with trio.fail_after(WAIT_S):
        for req, out, fields in (*URL_OPS, *TEXT_OPS):
            replies[req] = await run(dispatcher, req, out, *fields(url))
        job = replies["research"].get("JOB_ID") or ""
        await run(dispatcher, "result", "RESEARCH", ("JOB_ID", job), ("WAIT_MS", "10000"))
        await trio.testing.wait_all_tasks_blocked()  # the job's record follows its end
    writes = [write for _, write in outbox_of(dispatcher)._store.oldest(1000)]
    kept = origin.url("origin.test", "/page").replace("https://", "https://***@", 1)
    for req, _, _ in URL_OPS:
        assert replies[req].get("ERROR") == "url_rejected:userinfo", replies[req]
    # A FAIL echoes what it refused without the password; search's OK echoes its QUERY as
    # it was searched (sent to the backend, as every query is).
    refused = [req for req, _, _ in (*URL_OPS, *TEXT_OPS) if replies[req].status is Status.FAIL]
    assert {"fetch", "meta", "resolve", "summarize", "verify", "api"} <= set(refused)
    assert all(PASSWORD not in value for req in refused for _, value in replies[req].fields)
    assert replies["fetch"].get("URL") == kept
    assert not [write.data for write in writes if PASSWORD in write.data]
    audits = [json.loads(w.data) for w in writes if w.type == "audit"]
    assert {a["target"] for a in audits if a["op"] in ("fetch", "meta", "resolve")} == {kept}
    assert [w.type for w in writes if w.type == "research_job"] == ["research_job"]
    assert files_holding(web_config.daemon.state_dir, PASSWORD) == []
    # httpx logs each request it sends; the search backend's holds the query it was asked.
    logged = [r for r in caplog.records if r.name != "httpx" and PASSWORD in r.getMessage()]
    assert logged == []


@pytest.mark.parametrize("space", [" ", "\t", "\u3000"])
async def test_a_password_holding_a_space_is_refused_and_kept_nowhere(
    dispatcher: Dispatcher,
    web_config: Config,
    origin: Origin,
    caplog: pytest.LogCaptureFixture,
    space: str,
) -> None:
    """The gate refuses the URL (``url_rejected:whitespace``) before it sees the userinfo;
    the reply's echo (URL, api's ENDPOINT) and the audit records still hold no password:
    WHATWG and urlsplit read "user:ab s3cr3t@" as the URL's userinfo."""
    caplog.set_level("DEBUG")
    url = origin.url("origin.test", "/page").replace(
        "https://", f"https://user:ab{space}{PASSWORD}@", 1
    )
    replies: dict[str, Reply] = {}
    with trio.fail_after(WAIT_S):
        for req, out, fields in (*URL_OPS, TEXT_OPS[0]):
            replies[req] = await run(dispatcher, req, out, *fields(url))
        replies["fetch many"] = await run(
            dispatcher, "fetch", "CONTENT", ("URL", url), ("URL", url)
        )
    writes = [write for _, write in outbox_of(dispatcher)._store.oldest(1000)]
    kept = origin.url("origin.test", "/page").replace("https://", "https://***@", 1)
    assert replies["fetch many"].get_all("FETCH_ERROR") == [f"{kept} url_rejected:whitespace"] * 2
    for reply in replies.values():
        assert reply.status is Status.FAIL, reply
        assert all(PASSWORD not in value for _, value in reply.fields), reply
    assert (replies["fetch"].get("URL"), replies["api"].get("ENDPOINT")) == (kept, kept)
    assert not [write.data for write in writes if PASSWORD in write.data]
    audits = [json.loads(w.data) for w in writes if w.type == "audit"]
    assert {a["target"] for a in audits} == {kept, f"{kept} {kept}"}
    assert files_holding(web_config.daemon.state_dir, PASSWORD) == []
    assert [r for r in caplog.records if PASSWORD in r.getMessage()] == []
