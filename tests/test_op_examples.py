"""Every op's example in docs/ops.md is what a real daemon answers, and every field a reply
carries is one its op declares (issue 15).

One daemon, composed as ``csp-web serve`` composes it (web, tool, browser and node
specialists, the outbox and the reference Memory Specialist), serves a Unix socket; its web
ops reach a local trustme HTTPS origin under ``*.test`` names, search goes to a SearXNG-shaped
route there, the API to a GitHub-shaped one, exec runs in bubblewrap in a scratch workspace,
mcp calls the MCP tests' toy server, node a scripted node paired as the node tests pair
theirs, browser and canvas a Chromium behind the guard proxy (trusting the origin's CA as the
browser tests do). Each declared example request is sent through the CSP/1 client and its
reply, normalised as the doc shows it (``opsdoc.normalise``), must equal the declared reply.
"""

from __future__ import annotations

import json
import os
import re
import ssl
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import jsonschema  # type: ignore[import-untyped]  # no stubs installed
import pytest
import trio
import trustme

from csp_web.app import opsdoc
from csp_web.app.catalog import SPECIALISTS
from csp_web.app.memory_path import open_memory_path
from csp_web.client.trio_client import Client, open_client
from csp_web.config import Config, with_section
from csp_web.core.api.fields import COMMON_REPLY_FIELDS, Example
from csp_web.core.api.ops import OpSpec
from csp_web.core.api.specialist import Composable
from csp_web.core.daemon.compose import op_table, open_daemon
from csp_web.core.daemon.lifecycle import serve
from csp_web.mcp_face.results import structured_fields, typed_value
from csp_web.mcp_face.tools import tool_spec
from csp_web.net import GuardConfig
from protocol import Reply, Status
from specialists.browser import BROWSER, GuardSetting
from specialists.browser.config import SECTION, BrowserConfig, browser_section
from specialists.browser.services import BrowserServices, open_browser_services
from specialists.node import NODE
from specialists.node.config import NodesConfig
from specialists.tool import TOOL
from specialists.tool.config import tool_section
from specialists.web import make_web
from specialists.web.config import ApiConfig, SearchProvider, web_section
from tests.browser.support import spki_hash
from tests.conftest import Sink
from tests.net._dns import FixedResolver
from tests.net._origin import Origin, start_https_origin
from tests.net._origin import Reply as OriginReply
from tests.node.support import ScriptedNode, identity, nodes_op
from tests.tool.exec_support import make_config, scratch_dir
from tests.tool.mcp_servers.support import toy_config

REPO = Path(__file__).resolve().parent.parent
NAMES = ("origin.test", "api.test", "search.test")
WAIT_S = 60.0
TOKEN_ENV = "TEST_EXAMPLE_TOKEN"
NODE_NAME = "lab1"
LOCATION = "lat:53.5,lon:8.1"
# Examples that use what an earlier one made run after it: a fileKey (fetch), a saved
# cabinet entry (save), a research job (research).
FIRST = ("fetch", "save", "research")

PAGE = (
    b'<!doctype html><html lang="en"><head><title>Tides</title>'
    b'<meta property="og:title" content="Tides of the North Sea">'
    b'<meta property="og:description" content="Two high tides a day.">'
    b'<meta property="og:site_name" content="Tide Tables">'
    b'<meta name="author" content="Jan de Vries">'
    b'<meta property="article:published_time" content="2026-03-05T08:00:00+01:00">'
    b"</head><body><article><h1>Tides</h1>"
    b"<p>The North Sea has two high tides every day, about twelve hours and twenty-five minutes"
    b" apart. Spring tides follow the new and the full moon; neap tides fall between them.</p>"
    b"<p>Tide tables give the times of high and low water for each port, and harbour masters"
    b" publish them a year ahead. The range at Dover is about six metres at springs.</p>"
    b"</article></body></html>"
)


@dataclass
class Run:
    origin: Origin
    client: Client
    state_dir: str
    workspace: str
    made: dict[str, str]  # placeholder -> the real value an earlier example made
    node: ScriptedNode | None = None  # a paired node (lab1) the node example reaches

    def placeholders(self) -> dict[str, str]:
        """Real text -> what the doc shows for it."""
        return {self.workspace: "<workspace>", self.state_dir: "<state_dir>"}


def _routes(origin: Origin) -> None:
    html = [("content-type", "text/html; charset=utf-8")]
    origin.routes["/tides"] = lambda _: OriginReply(200, html, PAGE)
    origin.routes["/moved"] = lambda _: OriginReply(
        301, [("location", origin.url("origin.test", "/tides"))]
    )
    hits = [
        {"url": origin.url("origin.test", "/tides"), "title": "Tides", "score": 2.0,
         "content": "The North Sea has two high tides every day.",
         "publishedDate": "2026-03-05T00:00:00", "language": "en"},
        {"url": origin.url("origin.test", "/moved"), "title": "Tide tables", "score": 1.0,
         "content": "Times of high and low water for each port."},
    ]  # fmt: skip
    searx = json.dumps({"query": "tides", "number_of_results": 2, "results": hits}).encode()
    origin.routes["/searx/search"] = lambda _: OriginReply(
        200, [("content-type", "application/json")], searx
    )
    for name, kind in DOCUMENTS.items():
        body = (FIXTURES / name).read_bytes()
        origin.routes[f"/doc/{name}"] = partial(_document, kind, body)
    repo = json.dumps({"name": "tables", "full_name": "tides/tables", "stargazers_count": 7})
    origin.routes["/repos/tides/tables"] = lambda _: OriginReply(
        200, [("content-type", "application/json")], repo.encode()
    )


# Documents fetch reads (issue 24), served with their real types.
FIXTURES = REPO / "tests" / "web" / "fixtures"
DOCUMENTS = {
    "pdf/chrome_09_two.pdf": "application/pdf",
    "pdf/scanned.pdf": "application/pdf",
    "documents/report.docx": (
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    ),
    "documents/ledger.csv": "text/csv",
    "documents/rss2.xml": "application/rss+xml",
}


def _document(kind: str, body: bytes, _: object) -> OriginReply:
    return OriginReply(200, [("content-type", kind)], body)


def _browser(dns: FixedResolver) -> Composable:
    """The browser specialist, its guard proxy resolving with the test's DNS."""

    @asynccontextmanager
    async def opened(section: BrowserConfig, config: Config) -> AsyncIterator[BrowserServices]:
        guard = GuardSetting(web_section(config).guard)
        async with open_browser_services(config, guard=guard, resolver=dns) as services:
            yield services

    return replace(BROWSER, open_services=opened)


def _config(config: Config, origin: Origin, workspace: str, issuer: trustme.CA) -> Config:
    guard = GuardConfig(allowed_ports=(origin.port,), allow_private=("127.0.0.1",))
    searx = SearchProvider("searxng", base_url=origin.url("search.test", "/searx/"))
    search = replace(web_section(config).search, order=("searxng",), providers={"searxng": searx})
    apis = {"github": ApiConfig(origin.url("api.test", "/"), auth_env=TOKEN_ENV)}
    web = replace(web_section(config), guard=guard, search=search, apis=apis)
    browser = replace(browser_section(config), trusted_spki=(spki_hash(issuer),))
    tool = replace(tool_section(config), exec=make_config(workspace), mcp=toy_config())
    return with_section(
        with_section(with_section(config, "web", web), "tool", tool), SECTION, browser
    )


async def _paired_node(run: Run, node_path: str) -> ScriptedNode:
    """A scripted node paired as ``lab1`` (protocol/NODES.md), connected."""
    node = ScriptedNode(await trio.open_unix_socket(node_path))
    reply = await node.call("pair", "PAIR_CODE", *identity(NODE_NAME, ("location_get",)))
    code = (reply.get("DATA") or "").removeprefix("code:")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(nodes_op, run.client, "approve", ("CODE", code))
        paired = await node.next_task()
        await node.answer(paired, Status.OK, ("SCOPE", "[node]"), ("DATA", "stored"))
    return node


async def _answer_location(node: ScriptedNode) -> None:
    """Answer the one action the node example asks, as a node with a fixed location would."""
    task = await node.next_task()
    fields = (("SOURCE", "fixed"), ("ACCURACY_M", "10"), ("WORK_MS", "2"))
    await node.answer(task, Status.OK, ("SCOPE", "[node]"), ("DATA", LOCATION), *fields)


@pytest.fixture
async def run(
    nursery: trio.Nursery,
    config: Config,
    sink: Sink,
    ca: trustme.CA,
    trust: ssl.SSLContext,
    sock_dir: str,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Run]:
    monkeypatch.setenv(TOKEN_ENV, "ghp-example-token")
    issuer = ca.create_child_ca()  # Chromium trusts the key of a presented CA (browser tests)
    origin = await start_https_origin(nursery, issuer, NAMES)
    _routes(origin)
    dns = FixedResolver({name: ["127.0.0.1"] for name in NAMES})
    path = os.path.join(sock_dir, "csp.sock")
    nodes = NodesConfig(socket_path=os.path.join(sock_dir, "nodes.sock"))
    with scratch_dir() as workspace:
        composed = with_section(_config(config, origin, workspace, issuer), "nodes", nodes)
        web = make_web(resolver=dns, ssl_context=trust)
        specialists = (web, TOOL, _browser(dns), NODE)
        async with (
            open_daemon(composed, specialists, memory=open_memory_path(composed)) as daemon,
            trio.open_nursery() as inner,
        ):
            await inner.start(partial(serve, daemon, stdio=None, socket_path=path))
            async with open_client(path) as client:
                run = Run(origin, client, composed.daemon.state_dir, workspace, {})
                assert nodes.socket_path is not None
                run.node = await _paired_node(run, nodes.socket_path)
                yield run
                await run.node.stream.aclose()
            inner.cancel_scope.cancel()


def _ordered(ops: list[OpSpec]) -> list[OpSpec]:
    first = [op for name in FIRST for op in ops if op.req == name]
    return first + [op for op in ops if op not in first]


async def _exchange(run: Run, op: OpSpec) -> tuple[Reply, str]:
    assert op.example is not None
    values = {opsdoc.FILE_KEY: run.made.get(opsdoc.FILE_KEY, opsdoc.FILE_KEY)}
    values[opsdoc.JOB_ID] = run.made.get(opsdoc.JOB_ID, opsdoc.JOB_ID)
    values["<workspace>"] = run.workspace
    task = opsdoc.request_of(op.example, port=run.origin.port, values=values)
    async with trio.open_nursery() as nursery:
        if op.req == "node":
            assert run.node is not None
            nursery.start_soon(_answer_location, run.node)
        reply = await run.client.call(task, timeout_s=WAIT_S)
    for name, placeholder in (("FILE_KEY", opsdoc.FILE_KEY), ("JOB_ID", opsdoc.JOB_ID)):
        if reply.get(name) and placeholder not in run.made:
            run.made[placeholder] = reply.get(name) or ""
    text = opsdoc.normalise(
        opsdoc.reply_text(reply),
        port=run.origin.port,
        replacements=run.placeholders(),
        volatile=op.example.volatile,
    )
    return reply, text


def _steady(text: str, op: OpSpec) -> str:
    volatile = op.example.volatile if op.example is not None else ()
    return "".join(
        line for line in text.splitlines(keepends=True) if line.split(" ", 1)[0] not in volatile
    )


async def test_every_example_reply_is_what_the_daemon_answers_and_declares(run: Run) -> None:
    """Also D-1: each reply field the examples produce is declared by its op."""
    ops = [op for op in op_table(SPECIALISTS) if op.example is not None]
    table = {op.req: op for op in ops}
    got: dict[str, str] = {}
    undeclared: dict[str, list[str]] = {}
    misread: dict[str, list[str]] = {}
    with trio.fail_after(WAIT_S * 2):
        for op in _ordered(ops):
            reply, got[op.req] = await _exchange(run, op)
            if missing := opsdoc.undeclared(op, reply):
                undeclared[op.req] = missing
            if wrong := _misread(op, reply):
                misread[op.req] = wrong
    wanted = {op.req: op.example.reply for op in ops if op.example is not None}
    if os.environ.get("CSP_WRITE_EXAMPLES"):  # regenerating: see docs/adding-an-op.md
        Path(os.environ["CSP_WRITE_EXAMPLES"]).write_text(json.dumps(got, indent=1), "utf-8")
    # A volatile field may also be absent on another machine (exec's CPU_MS without cgroups).
    got = {req: _steady(text, table[req]) for req, text in got.items()}
    wanted = {req: _steady(text, table[req]) for req, text in wanted.items()}
    assert undeclared == {}
    assert misread == {}
    assert got == wanted


def _misread(op: OpSpec, reply: Reply) -> list[str]:
    """What of ``reply`` the MCP face would not read as ``op`` declares it: a typed field
    whose value does not parse, a single field that repeats, structured content that fails
    the tool's output schema (SPEC D-5; issue 28)."""
    tool = tool_spec(op.describe(), max_timeout_ms=1000)
    counts = Counter(name for name, _ in reply.fields)
    wrong = {
        f"{name}:{value}"
        for name, value in reply.fields
        if name in tool.replies and typed_value(tool.replies[name].kind, value) is None
    }
    wrong |= {
        f"{name} repeats"
        for name, count in counts.items()
        if count > 1 and name in tool.replies and not tool.replies[name].repeat
    }
    assert tool.output_schema is not None
    validator = jsonschema.Draft202012Validator(tool.output_schema)
    structured = structured_fields(reply, tool.replies)
    wrong |= {f"schema: {error.message}" for error in validator.iter_errors(structured)}
    return sorted(wrong)


# Further exchanges, not in the doc, for the reply shapes the examples do not show: several
# URLs and queries, the board, FAIL replies and their fields, the other cron and mcp actions.
OTHER_EXCHANGES = (
    "TASK REQ:fetch https://origin.test/tides IN:WEB OUT:CONTENT\n",
    "TASK REQ:fetch IN:WEB OUT:CONTENT\nURL https://origin.test/tides\n"
    "URL https://origin.test/missing\nBOARD true\nMAX_CHARS 50\n",
    f"TASK REQ:fetch IN:WEB OUT:CONTENT\nFILE_KEY {opsdoc.FILE_KEY}\nSTART 300\nBOARD true\n",
    "TASK REQ:fetch IN:WEB OUT:CONTENT\nFILE_KEY fk_aaaaaaaaaaaaaaaa\n",
    "TASK REQ:fetch https://origin.test/missing IN:WEB OUT:CONTENT\n",
    "TASK REQ:fetch https://origin.test/doc/pdf/chrome_09_two.pdf IN:WEB OUT:CONTENT\n"
    "MAX_PAGES 1\n",
    "TASK REQ:fetch https://origin.test/doc/pdf/scanned.pdf IN:WEB OUT:CONTENT\n",
    "TASK REQ:fetch IN:WEB OUT:CONTENT\nURL https://origin.test/doc/documents/report.docx\n"
    "URL https://origin.test/doc/documents/ledger.csv\n"
    "URL https://origin.test/doc/documents/rss2.xml\n",
    "TASK REQ:meta https://origin.test/missing IN:WEB OUT:META\n",
    "TASK REQ:resolve https://origin.test/missing IN:WEB OUT:URL\n",
    "TASK REQ:search IN:WEB OUT:URL_REFS\nQUERY tides\nQUERY moon\n",
    "TASK REQ:search IN:WEB OUT:URL_REFS\nQUERY tides\nMODE fuse\nVERTICAL news\nPREFETCH 1\n"
    "EXCLUDE_SITE other.test\nBEFORE 2026-12-31\nUNDATED drop\n",
    "TASK REQ:search IN:WEB OUT:URL_REFS\nQUERY tides\nQUERY moon\nMAX_PER_DOMAIN 2\n",
    "TASK REQ:search IN:WEB OUT:URL_REFS\nQUERY tides\nCOUNTRY zz\n",
    "TASK REQ:api github:/repos/tides/nothing IN:WEB OUT:API_RESPONSE\n",
    'TASK REQ:summarize IN:WEB OUT:SUMMARY\nTEXT "Tides rise. Tides fall. The moon pulls."\n',
    f"TASK REQ:summarize IN:WEB OUT:SUMMARY\nFILE_KEY {opsdoc.FILE_KEY}\n",
    f"TASK REQ:save {opsdoc.FILE_KEY} IN:WEB OUT:ACK\n",
    f"TASK REQ:cabinet {opsdoc.FILE_KEY} IN:WEB OUT:CONTENT\n",
    "TASK REQ:cabinet fk_aaaaaaaaaaaaaaaa IN:WEB OUT:CONTENT\n",
    f"TASK REQ:write_file IN:WEB OUT:PATH\nFILE_KEY {opsdoc.FILE_KEY}\nPATH <workspace>/a.md\n",
    f"TASK REQ:write_file IN:WEB OUT:PATH\nFILE_KEY {opsdoc.FILE_KEY}\nPATH <workspace>/a.md\n",
    "TASK REQ:result rj_0000000000000000 IN:WEB OUT:RESEARCH\n",
    "TASK REQ:board IN:WEB OUT:BOARD\n",
    'TASK REQ:exec IN:SHELL OUT:EXEC_RESULT\nCOMMAND "echo low >&2; exit 3"\nSHELL true\n',
    'TASK REQ:exec IN:SHELL OUT:EXEC_RESULT\nCOMMAND "rm -rf /"\n',
    'TASK REQ:exec IN:SHELL OUT:EXEC_RESULT\nCOMMAND "echo high tide"\nSHELL true\n',
    'TASK REQ:exec IN:SHELL OUT:EXEC_RESULT\nCOMMAND "echo high tide"\nSHELL true\n',
    'TASK REQ:cron IN:TOOL OUT:CRON_RESULT\nACTION add\nJOB_ID ping\nSCHEDULE "0 6 * * *"\n'
    'TASK "TASK REQ:ping IN:SYS OUT:PONG"\n',
    "TASK REQ:cron IN:TOOL OUT:CRON_RESULT\nACTION list\n",
    "TASK REQ:cron IN:TOOL OUT:CRON_RESULT\nACTION run\nJOB_ID ping\n",
    "TASK REQ:cron IN:TOOL OUT:CRON_RESULT\nACTION disable\nJOB_ID ping\n",
    "TASK REQ:cron IN:TOOL OUT:CRON_RESULT\nACTION enable\nJOB_ID ping\n",
    "TASK REQ:cron IN:TOOL OUT:CRON_RESULT\nACTION remove\nJOB_ID ping\n",
    "TASK REQ:mcp IN:TOOL OUT:MCP_RESULT\nSERVER toy\nACTION list\n",
    'TASK REQ:mcp IN:TOOL OUT:MCP_RESULT\nSERVER toy\nTOOL fail\nPARAMS {"message":"ebb"}\n',
    "TASK REQ:mcp IN:TOOL OUT:MCP_RESULT\nSERVER nowhere\nACTION list\n",
    "TASK REQ:nodes IN:SYS OUT:NODES\nACTION approve\nCODE 12345678\n",
    "TASK REQ:stats IN:SYS OUT:STATS\n",
    "TASK REQ:browser IN:TOOL OUT:BROWSER_RESULT\nACTION navigate\nSESSION s\n"
    "TARGET_URL https://origin.test/tides\n",
    "TASK REQ:browser IN:TOOL OUT:BROWSER_RESULT\nACTION extract\nSESSION s\nMAX_CHARS 20\n",
    "TASK REQ:browser IN:TOOL OUT:BROWSER_RESULT\nACTION extract\nSESSION s\nSELECTOR css:h1\n",
    "TASK REQ:browser IN:TOOL OUT:BROWSER_RESULT\nACTION click\nSESSION s\nSELECTOR css:h1\n",
    "TASK REQ:browser IN:TOOL OUT:BROWSER_RESULT\nACTION click\nSESSION s\nSELECTOR css:nav\n",
    "TASK REQ:browser IN:TOOL OUT:BROWSER_RESULT\nACTION screenshot\nSESSION s\n",
    "TASK REQ:browser IN:TOOL OUT:BROWSER_RESULT\nACTION close\nSESSION s\n",
    "TASK REQ:canvas IN:TOOL OUT:CANVAS_RESULT\nACTION present\nURL https://origin.test/tides\n",
    "TASK REQ:canvas IN:TOOL OUT:CANVAS_RESULT\nACTION snapshot\n",
    "TASK REQ:canvas IN:TOOL OUT:CANVAS_RESULT\nACTION eval\nEXPRESSION 1+1\n",
    "TASK REQ:canvas IN:TOOL OUT:CANVAS_RESULT\nACTION hide\n",
    "TASK REQ:node IN:TOOL OUT:NODE_RESULT\nACTION notify\nNODE nowhere\n",
)


async def test_every_field_other_exchanges_carry_is_declared_by_their_op(run: Run) -> None:
    """D-1: OK, PARTIAL and FAIL replies of every op with an example, beyond the examples."""
    table = {(op.req, op.domain): op for op in op_table(SPECIALISTS)}
    undeclared: dict[str, set[str]] = {}
    misread: dict[str, set[str]] = {}
    statuses: set[tuple[str, str]] = set()
    with trio.fail_after(WAIT_S * 2):
        for request in OTHER_EXCHANGES:
            values = {"<workspace>": run.workspace, **run.made}
            task = opsdoc.request_of(Example(request, ""), port=run.origin.port, values=values)
            reply = await run.client.call(task, timeout_s=WAIT_S)
            if reply.get("FILE_KEY") and opsdoc.FILE_KEY not in run.made:
                run.made[opsdoc.FILE_KEY] = reply.get("FILE_KEY") or ""
            op = table[(task.req, task.domain)]
            statuses.add((op.req, str(reply.status)))
            if missing := opsdoc.undeclared(op, reply):
                undeclared.setdefault(op.req, set()).update(missing)
            misread.setdefault(op.req, set()).update(_misread(op, reply))
    assert undeclared == {}
    assert {req: wrong for req, wrong in misread.items() if wrong} == {}
    # The exchanges reach the shapes they are here for (not all refused alike).
    assert {("fetch", "PARTIAL"), ("fetch", "FAIL"), ("search", "OK"), ("exec", "FAIL")} <= statuses
    assert {("cron", "OK"), ("mcp", "OK"), ("mcp", "FAIL"), ("api", "FAIL")} <= statuses
    assert {("browser", "OK"), ("browser", "FAIL"), ("canvas", "OK")} <= statuses


def test_every_op_has_an_example() -> None:
    without = {op.req for op in op_table(SPECIALISTS) if op.example is None}
    assert without == set()


def test_every_declared_reply_field_is_one_the_code_can_send() -> None:
    """A declared name that no module of its specialist (or the core) spells is stale."""
    sources = [*(REPO / "csp_web").rglob("*.py"), *(REPO / "specialists").rglob("*.py")]
    spelt = set(re.findall(r'"([A-Z][A-Z0-9_]+)"', "".join(p.read_text("utf-8") for p in sources)))
    code = {(op.req, field.name) for op in op_table(SPECIALISTS) for field in op.replies}
    stale = sorted((req, name) for req, name in code if name not in spelt)
    assert stale == []


def test_no_op_declares_a_field_every_reply_carries() -> None:
    shared = {
        (op.req, field.name)
        for op in op_table(SPECIALISTS)
        for field in op.replies
        if field.name in COMMON_REPLY_FIELDS
    }
    assert shared == set()


def test_normalising_writes_placeholders_for_what_changes_between_runs() -> None:
    text = (
        "STATUS OK\nFILE_KEY fk_abcdefghijklmnop\nJOB_ID rj_0123456789abcdef\n"
        "SAVED_AT 2026-11-24T20:51:29Z\nEXEC_TIME 17\nSTEP fetch https://origin.test:4431/a ok"
        ' ms:12\nPATH /tmp/csp-exec-x/tides.md\nNODE {"paired_at":1795554115.14}\n'
    )
    assert opsdoc.normalise(text, port=4431, replacements={"/tmp/csp-exec-x": "<workspace>"}) == (
        f"STATUS OK\nFILE_KEY {opsdoc.FILE_KEY}\nJOB_ID {opsdoc.JOB_ID}\nSAVED_AT {opsdoc.TIME}\n"
        "EXEC_TIME 0\nSTEP fetch https://origin.test/a ok ms:0\nPATH <workspace>/tides.md\n"
        'NODE {"paired_at":0}\n'
    )


def test_normalising_cuts_long_values_and_counts_long_runs_of_one_field() -> None:
    text = "STATUS OK\n" + "OP x\n" * 5 + "DATA " + "a" * 200 + "\n"
    lines = opsdoc.normalise(text).splitlines()
    assert lines[:4] == ["STATUS OK", "OP x", "OP x", "OP x"]
    assert lines[4] == "DATA " + "a" * (opsdoc.MAX_VALUE_CHARS - 5) + "…"
    assert lines[5] == "… 2 more OP"
