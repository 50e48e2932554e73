"""Issue 8.17: an MCP server's stderr reaches the daemon's log as records, so ``--log-json``
keeps every stderr line one JSON object. The daemon runs as a process, the toy server as its
real stdio child."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import trio
import trio.testing
import yaml

from csp_web.core.api.logs import relay_lines
from protocol import Task, serialize
from tests.tool.mcp_servers.support import TOY_SERVER

CSP_WEB = shutil.which("csp-web") or "csp-web"
PROCESS_TIMEOUT_S = 60  # a bound for hangs, far above what the run takes


async def test_server_stderr_lines_are_json_log_records_under_log_json(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    servers = {"toy": {"command": sys.executable, "args": [str(TOY_SERVER)]}}
    settings = {
        "daemon": {"state_dir": str(tmp_path / "state")},
        "tool": {"mcp": {"servers": servers}},
    }
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "CSP_WEB_CONFIG"}
    env["XDG_STATE_HOME"] = str(tmp_path / "xdg")
    params = json.dumps({"text": 'plain words, then {"not": json'})
    stdin = serialize(
        Task(
            "mcp",
            "TOOL",
            "MCP_RESULT",
            None,
            (("ID", "m-1"), ("SERVER", "toy"), ("TOOL", "complain"), ("PARAMS", params)),
        )
    )
    with trio.fail_after(PROCESS_TIMEOUT_S):
        done = await trio.run_process(
            [CSP_WEB, "serve", "--config", str(config), "--log-json"],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
        )
    assert done.returncode == 0, done.stderr.decode()
    assert b"STATUS OK" in done.stdout
    entries = [json.loads(line) for line in done.stderr.decode().splitlines()]
    relayed = [entry for entry in entries if entry.get("server") == "toy"]
    assert {
        "level": "info",
        "logger": "specialists.tool.mcp.session",
        "msg": 'MCP server toy stderr: plain words, then {"not": json',
        "server": "toy",
    }.items() <= relayed[-1].items()


async def relayed(chunks: list[bytes], max_line_bytes: int) -> list[str]:
    """The lines ``relay_lines`` emits for ``chunks`` written, then the end of the stream."""
    send, receive = trio.testing.memory_stream_one_way_pair()
    lines: list[str] = []
    for chunk in chunks:
        await send.send_all(chunk)
    await send.aclose()
    with trio.fail_after(PROCESS_TIMEOUT_S):
        await relay_lines(receive, lines.append, max_line_bytes=max_line_bytes)
    return lines


async def test_relayed_lines_split_at_newlines_whatever_the_chunks() -> None:
    chunks = [b"one\r\ntw", b"o\n", b"\n", b"thr\xffee"]
    assert await relayed(chunks, 100) == ["one", "two", "", "thr\ufffdee"]


async def test_a_line_of_max_line_bytes_is_one_record_and_one_more_byte_makes_two() -> None:
    assert await relayed([b"a" * 8 + b"\n"], 8) == ["a" * 8]
    assert await relayed([b"a" * 9 + b"\n"], 8) == ["a" * 8, "a"]
    assert await relayed([b"b" * 17], 8) == ["b" * 8, "b" * 8, "b"]
