"""Stdin's EOF ends the stdio face only after every request read before it is answered.

Before, the SDK's loop ended at EOF and dropped the calls still in flight: a client that
wrote its last calls and closed stdin got some of them answered, some ``Connection closed``
and some never."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio

from .conftest import WAIT_S, face_command, face_env
from .test_stdio import _config_file

CALLS = 20


async def _run_face(tmp_path: Path, data: bytes) -> tuple[list[dict[str, Any]], bytes]:
    """Run ``csp-web mcp`` with ``data`` on stdin to its EOF: its answers and its stderr,
    once it has exited 0."""
    command, argv = face_command("--config", _config_file(tmp_path))
    with trio.fail_after(WAIT_S * 3):
        done = await trio.run_process(
            [command, *argv],
            stdin=data,
            capture_stdout=True,
            capture_stderr=True,
            env=face_env(),
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return [json.loads(line) for line in done.stdout.decode().splitlines()], done.stderr


def _line(message: dict[str, object]) -> bytes:
    return json.dumps(message).encode() + b"\n"


async def test_every_call_written_before_stdin_closes_is_answered(tmp_path: Path) -> None:
    hello = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    }
    data = _line({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
    data += _line({"jsonrpc": "2.0", "method": "notifications/initialized"})
    for n in range(1, CALLS + 1):
        params = {"name": "tool_cron", "arguments": {"action": "list"}}
        data += _line({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params})
    answers, stderr = await _run_face(tmp_path, data)
    assert sorted(answer["id"] for answer in answers) == list(range(CALLS + 1))
    calls = [answer for answer in answers if answer["id"] != 0]
    assert all(answer["result"]["structuredContent"]["STATUS"] == "OK" for answer in calls)
    assert b"Traceback" not in stderr


async def test_an_open_listen_stream_does_not_hold_the_face_past_stdin_eof(
    tmp_path: Path,
) -> None:
    """A ``subscriptions/listen`` stream is held open by the client, never answered as a
    call is: at EOF the face ends without waiting the drain period for it (630 s here), and
    the call read before EOF is still answered."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    listen = {"notifications": {"toolsListChanged": True}, "_meta": meta}
    call = {"name": "tool_cron", "arguments": {"action": "list"}, "_meta": meta}
    data = _line({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": listen})
    data += _line({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
    answers, _ = await _run_face(tmp_path, data)
    (called,) = [answer for answer in answers if answer.get("id") == 2]
    assert called["result"]["structuredContent"]["STATUS"] == "OK"
    acknowledged = [
        a for a in answers if a.get("method") == "notifications/subscriptions/acknowledged"
    ]
    assert len(acknowledged) == 1
