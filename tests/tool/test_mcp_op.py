"""The mcp op end to end: frame in, the daemon's dispatcher, a real stdio MCP server, reply out."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
import trio
import trio.testing

from csp_web.app.catalog import SPECIALISTS
from csp_web.app.memory_path import outbox_path
from csp_web.config import Config, with_section
from csp_web.core.api.context import Peer
from csp_web.core.daemon.compose import open_daemon
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.memory.outbox import open_outbox
from protocol import Reply, Status, Task
from specialists.tool import TOOL
from specialists.tool.config import ToolConfig, tool_section
from specialists.tool.mcp.config import StdioServerConfig
from specialists.tool.services import ToolServices, open_mcp_host
from tests.harness import build_dispatcher, outbox_of
from tests.tool.mcp_servers.support import toy_config


@pytest.fixture
async def dispatcher(config: Config) -> AsyncIterator[Dispatcher]:
    config = with_section(config, "tool", ToolConfig(mcp=toy_config(call_timeout_s=5.0)))
    async with (
        open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
        open_mcp_host(tool_section(config).mcp) as host,
    ):
        yield build_dispatcher(
            config, outbox_path(config, outbox), TOOL.ops, ToolServices(None, host, None)
        )


async def _run(dispatcher: Dispatcher, *fields: tuple[str, str]) -> Reply:
    return await dispatcher.run(Task("mcp", "TOOL", "MCP_RESULT", None, fields), Peer("t"))


async def test_mcp_call_replies_with_tool_text_and_exec_time(dispatcher: Dispatcher) -> None:
    reply = await _run(
        dispatcher, ("SERVER", "toy"), ("TOOL", "echo"), ("PARAMS", '{"text": "hello"}')
    )
    assert reply.status is Status.OK, reply
    assert reply.get("SCOPE") == "[toy]"
    assert reply.get("DATA") == "hello"
    assert int(reply.get("EXEC_TIME") or "x") >= 0


async def test_mcp_list_gives_each_tool_with_its_input_schema(dispatcher: Dispatcher) -> None:
    reply = await _run(dispatcher, ("SERVER", "toy"), ("ACTION", "list"))
    tools = {json.loads(line)["name"]: json.loads(line) for line in reply.get_all("TOOL")}
    assert reply.get("DATA") == f"tools:{len(tools)}"
    assert "text" in json.dumps(tools["echo"]["input_schema"])


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ((("SERVER", "nope"), ("TOOL", "echo")), "mcp_unavailable"),
        ((("SERVER", "toy"),), "missing_field"),
        ((("SERVER", "toy"), ("TOOL", "echo"), ("PARAMS", "[1, 2]")), "invalid_field"),
        (
            (("SERVER", "toy"), ("TOOL", "echo"), ("PARAMS", '{"text":"a","text":"b"}')),
            "invalid_field",
        ),
        ((("SERVER", "toy"), ("TOOL", "echo"), ("PARAMS", '{"o":{"k":1,"k":2}}')), "invalid_field"),
        ((("SERVER", "toy"), ("TOOL", "fail")), "mcp_tool_error"),
    ],
)
async def test_mcp_errors_are_catalogue_fail_replies(
    dispatcher: Dispatcher, fields: tuple[tuple[str, str], ...], code: str
) -> None:
    reply = await _run(dispatcher, *fields)
    assert reply.status is Status.FAIL
    assert (reply.get("ERROR") or "").partition(":")[0] == code


async def test_hung_tool_answers_mcp_unavailable_within_the_task_deadline(
    dispatcher: Dispatcher,
) -> None:
    reply = await _run(dispatcher, ("SERVER", "toy"), ("TOOL", "hang"), ("TIMEOUT_MS", "1500"))
    assert reply.status is Status.FAIL
    assert reply.get("ERROR") == "mcp_unavailable:toy"


async def test_an_unconfigured_server_is_mcp_unavailable_with_the_seeds_spelling(
    config: Config,
) -> None:
    """Issue 8.17: with no MCP server configured at all, the seed's mcp_unavailable:<server>."""
    async with open_outbox(config.outbox_path, config.outbox, config.memory) as outbox:
        bare = build_dispatcher(
            config, outbox_path(config, outbox), TOOL.ops, ToolServices(None, None, None)
        )
        reply = await _run(bare, ("SERVER", "playwright-server"), ("TOOL", "click"))
    assert reply == Reply(
        Status.FAIL,
        (
            ("SCOPE", "[mcp]"),
            ("DATA", "none"),
            ("ERROR", "mcp_unavailable:playwright-server"),
            ("REASON", "not_configured"),
        ),
    )


async def test_mcp_audit_records_name_the_server_the_tool_and_the_action(
    dispatcher: Dispatcher,
) -> None:
    await _run(dispatcher, ("ID", "a-1"), ("SERVER", "toy"), ("TOOL", "echo"), ("PARAMS", "{}"))
    await _run(dispatcher, ("ID", "a-2"), ("SERVER", "nope"), ("ACTION", "list"))
    rows = outbox_of(dispatcher)._store.oldest(1000)  # the durable store is what to observe
    audits = {r["id"]: r for r in (json.loads(w.data) for _, w in rows if w.type == "audit")}
    assert {k: audits["a-1"][k] for k in ("server", "tool", "action")} == {
        "server": "toy",
        "tool": "echo",
        "action": "call",
    }
    assert (audits["a-2"]["server"], audits["a-2"]["action"]) == ("nope", "list")
    assert audits["a-2"]["error"] == "mcp_unavailable:nope"


async def test_stats_shows_each_mcp_servers_state_and_cause(config: Config) -> None:
    """Wired as the daemon wires it (the app's SPECIALISTS): one MCP line per server in stats."""
    missing = StdioServerConfig(command="/nonexistent/mcp-server")
    mcp = toy_config(servers={"gone": missing}, max_failures=1)
    config = with_section(config, "tool", replace(tool_section(config), mcp=mcp))
    async with (
        open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
        open_daemon(config, SPECIALISTS, memory=outbox_path(config, outbox)) as daemon,
    ):
        dispatcher = daemon.dispatcher
        failed = await _run(dispatcher, ("SERVER", "gone"), ("TOOL", "x"))
        await trio.testing.wait_all_tasks_blocked()
        stats = await dispatcher.run(Task("stats", "SYS", "STATS", None, ()), Peer("t"))
    [line] = stats.get_all("MCP")
    entry = json.loads(line)
    assert (entry["server"], entry["state"], entry["failures"]) == ("gone", "failed", 1)
    assert entry["last_error"].startswith("FileNotFoundError: ")
    assert failed.get("REASON") == f"start_failed:{entry['last_error']}"
