"""The MCP face over stdio, driven by the SDK's own client spawning ``python -m csp_web mcp``:
as a client of a running daemon (``--socket``) and with the daemon core in process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from csp_web.config import Config
from csp_web.core.daemon.compose import op_table
from csp_web.mcp_face.tools import build_tools
from specialists.web import WEB

from .conftest import (
    PAGE_TITLE,
    WAIT_S,
    WebDaemon,
    catalogue_tools,
    face_command,
    face_env,
)

WEB_TOOLS = catalogue_tools("WEB")


def face(*args: str) -> Client:
    command, argv = face_command(*args)
    return Client(StdioServerParameters(command=command, args=argv, env=face_env()))


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> CallToolResult:
    result = await client.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult)
    return result


def text_of(result: CallToolResult) -> str:
    (content,) = result.content
    assert content.type == "text"
    return content.text


async def test_a_running_daemons_ops_are_listed_with_the_schemas_of_its_registry(
    web_daemon: WebDaemon,
) -> None:
    with trio.fail_after(WAIT_S):
        async with face("--socket", web_daemon.socket_path) as client:
            listed = await client.list_tools()
    expected = build_tools(
        [op.describe() for op in op_table((WEB,))],
        exec_configured=False,
        max_timeout_ms=Config().tasks.max_timeout_ms,
    )
    assert [tool.name for tool in listed.tools] == WEB_TOOLS
    assert {t.name: t.input_schema for t in listed.tools} == {
        t.name: t.input_schema for t in expected
    }
    assert {t.name: t.description for t in listed.tools} == {
        t.name: t.description for t in expected
    }
    assert {t.name: t.output_schema for t in listed.tools} == {
        t.name: t.output_schema for t in expected
    }


async def test_a_fetch_through_the_face_is_a_daemon_task_audited_and_logged(
    web_daemon: WebDaemon,
) -> None:
    url = web_daemon.url()
    with trio.fail_after(WAIT_S):
        async with face("--socket", web_daemon.socket_path) as client:
            result = await call(client, "web_fetch", {"url": url})
    assert not result.is_error
    structured = result.structured_content
    assert structured is not None
    assert (structured["STATUS"], structured["SCOPE"], structured["TITLE"]) == (
        "OK",
        "[origin.test]",
        PAGE_TITLE,
    )
    assert structured["CITE"] == [f'{url} "{PAGE_TITLE}"']
    assert text_of(result).startswith(f"# {PAGE_TITLE}\n\nThe North Sea has two high tides")
    assert web_daemon.origin.paths() == ["/robots.txt", "/tides"]
    assert web_daemon.records("web_op") == []  # one record per op: its audit
    # O-4: the face's REQ:ops is in an IN:SYS summary (of one frame with the tests' config).
    summary, fetched = web_daemon.records("audit")
    assert summary.get("ops") == {"SYS/ops": 1}
    assert (fetched["op"], fetched["target"], fetched["outcome"]) == ("fetch", url, "OK")


async def test_a_truncated_fetch_is_partial_and_its_next_start_reads_the_rest(
    web_daemon: WebDaemon,
) -> None:
    url = web_daemon.url()
    with trio.fail_after(WAIT_S):
        async with face("--socket", web_daemon.socket_path) as client:
            whole = await call(client, "web_fetch", {"url": url})
            head = await call(client, "web_fetch", {"url": url, "max_chars": 100})
            assert head.structured_content is not None
            start = int(head.structured_content["NEXT_START"])
            rest = await call(client, "web_fetch", {"url": url, "start": start})
    assert whole.structured_content is not None
    assert rest.structured_content is not None
    content = whole.structured_content["DATA"]
    assert not head.is_error
    assert head.structured_content["STATUS"] == "PARTIAL"
    assert (start, head.structured_content["REMAINING_CHARS"]) == (100, len(content) - 100)
    assert text_of(head).endswith(
        f"\n\nTRUNCATED: {len(content) - 100} more characters; call web_fetch again with "
        "start=100 for the rest."
    )
    assert rest.structured_content["STATUS"] == "OK"
    assert head.structured_content["DATA"] + rest.structured_content["DATA"] == content


async def test_fails_are_error_results_with_the_daemons_code(web_daemon: WebDaemon) -> None:
    with trio.fail_after(WAIT_S):
        async with face("--socket", web_daemon.socket_path) as client:
            bound = await call(client, "web_fetch", {"url": web_daemon.url(), "max_chars": 0})
            blocked = await call(client, "web_fetch", {"url": "https://10.1.2.3/"})
            unknown = await call(client, "web_fetch", {"url": web_daemon.url(), "bogus": 1})
            missing = await call(client, "web_meta", {})
    assert [r.is_error for r in (bound, blocked, unknown, missing)] == [True] * 4
    assert text_of(bound) == "ERROR invalid_field:MAX_CHARS below 1\n\nSCOPE []"
    assert bound.structured_content == {
        "STATUS": "FAIL",
        "SCOPE": "[]",
        "DATA": "none",
        "ERROR": "invalid_field:MAX_CHARS below 1",
    }
    assert blocked.structured_content is not None
    assert blocked.structured_content["ERROR"].split(":")[0] == "ssrf_blocked"
    assert text_of(unknown) == "ERROR unknown_field:bogus"
    assert missing.structured_content is not None
    assert missing.structured_content["ERROR"] == "missing_field:URL"


def _config_file(tmp_path: Path, *, exec_root: str | None = None) -> str:
    lines = ["daemon:", f"  state_dir: {tmp_path / 'state'}"]
    if exec_root is not None:
        lines += ["tool:", "  exec:", f"    workspace_roots: [{exec_root}]"]
    path = tmp_path / "config.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


async def test_the_in_process_daemon_answers_and_hides_exec_unless_configured(
    tmp_path: Path,
) -> None:
    with trio.fail_after(WAIT_S):
        async with face("--config", _config_file(tmp_path)) as client:
            listed = await client.list_tools()
            jobs = await call(client, "tool_cron", {"action": "list"})
    assert [t.name for t in listed.tools] == catalogue_tools("TOOL", "WEB")
    assert not jobs.is_error
    assert jobs.structured_content is not None
    assert (jobs.structured_content["STATUS"], jobs.structured_content["DATA"]) == (
        "OK",
        "jobs:0,active:0,disabled:0",
    )


async def test_exec_is_listed_when_the_daemon_has_a_workspace(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with trio.fail_after(WAIT_S):
        async with face("--config", _config_file(tmp_path, exec_root=str(work))) as client:
            listed = await client.list_tools()
    assert [t.name for t in listed.tools] == catalogue_tools("SHELL", "TOOL", "WEB")


@pytest.mark.parametrize("selected", [["web_fetch"], ["web_search", "web_fetch"]])
async def test_tool_flags_expose_only_the_tools_named(
    web_daemon: WebDaemon, selected: list[str]
) -> None:
    flags = [arg for name in selected for arg in ("--tool", name)]
    with trio.fail_after(WAIT_S):
        async with face("--socket", web_daemon.socket_path, *flags) as client:
            listed = await client.list_tools()
    assert [t.name for t in listed.tools] == selected
