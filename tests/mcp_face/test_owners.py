"""Another uid the HTTP face admits (``socket.allowed_uids``) cannot reach the face owner's
browser sessions and saved logins: the face calls the daemon as its own uid, so such calls
are refused with ``permission_denied`` before any task is sent; the owner's own still run."""

from __future__ import annotations

import os
from functools import partial
from typing import Any

import pytest
import trio
from mcp.types import CallToolResult

from csp_web.core.daemon.compose import op_table
from csp_web.mcp_face.asgi import Admit
from csp_web.mcp_face.owners import foreign_refusal
from csp_web.mcp_face.peers import uid_gate
from csp_web.mcp_face.refresh import ToolSet
from csp_web.mcp_face.serve import _serve_http
from csp_web.mcp_face.server import build_server
from csp_web.mcp_face.tools import build_tools
from protocol import Reply, Status, Task
from specialists.browser import BROWSER
from specialists.tool import TOOL
from specialists.web import WEB

from .test_http import http_client
from .test_images import ScriptedDaemon

WAIT_S = 10.0
ME = os.getuid()
OTHER = ME + 7


def _browser(*fields: tuple[str, str]) -> Task:
    return Task("browser", "TOOL", "BROWSER_RESULT", None, fields)


@pytest.mark.parametrize(
    "fields",
    [
        (("ACTION", "navigate"), ("SESSION", "s")),
        (("ACTION", "navigate"), ("SESSION", "s2"), ("STATE", "shop-login")),
        (("ACTION", "forget_state"), ("NAME", "shop-login")),
        (("ACTION", "save_state"),),
        (("ACTION", "forget_state"),),
    ],
)
def test_a_browser_call_naming_per_uid_state_is_refused_for_another_uid(
    fields: tuple[tuple[str, str], ...],
) -> None:
    why = foreign_refusal(_browser(*fields), OTHER, ME)
    assert why is not None
    assert f"calls the daemon as uid {ME}, not uid {OTHER}" in why


@pytest.mark.parametrize("req", ["fetch", "search", "browser", "exec"])
def test_any_call_naming_a_budget_id_is_refused_for_another_uid(req: str) -> None:
    """The face's owner's BUDGET_IDs would pay for another uid's calls (and leak whether
    an id exists); a BUDGET of the call's own is fine."""
    task = Task(req, "WEB", "CONTENT", None, (("URL", "https://a.test/"), ("BUDGET_ID", "run")))
    why = foreign_refusal(task, OTHER, ME)
    assert why is not None
    assert why.startswith(f"{req} BUDGET_ID: ")
    assert foreign_refusal(task, ME, ME) is None
    own = Task(req, "WEB", "CONTENT", None, (("BUDGET", "fetches:1"),))
    assert foreign_refusal(own, OTHER, ME) is None


def test_the_refusal_names_what_was_refused() -> None:
    task = _browser(("ACTION", "save_state"), ("SESSION", "s"), ("NAME", "n"))
    assert foreign_refusal(task, OTHER, ME) == (
        "browser NAME, SESSION, ACTION save_state: this state is kept per uid, and this face "
        f"calls the daemon as uid {ME}, not uid {OTHER}; use the daemon's socket as your own uid"
    )


def test_an_unknown_peer_uid_is_refused_as_another_uid() -> None:
    why = foreign_refusal(_browser(("ACTION", "navigate"), ("SESSION", "s")), None, ME)
    assert why is not None
    assert "not an unknown uid" in why


def test_the_face_owners_own_browser_calls_are_never_refused() -> None:
    task = _browser(("ACTION", "save_state"), ("SESSION", "s"), ("NAME", "n"))
    assert foreign_refusal(task, ME, ME) is None


def test_another_uids_sessionless_browser_calls_and_other_ops_are_not_refused() -> None:
    assert foreign_refusal(_browser(("ACTION", "navigate")), OTHER, ME) is None
    fetch = Task("fetch", "WEB", "PAGE", None, (("TARGET_URL", "https://a.test/"),))
    assert foreign_refusal(fetch, OTHER, ME) is None


FK = "fk_aaaaaaaaaaaaaaaa"
# Every op whose state the daemon keeps per uid, as a call of it (security review B).
_PER_UID_CALLS = [
    Task("board", "WEB", "BOARD", None, ()),
    Task("save", "WEB", "ACK", None, (("FILE_KEY", FK),)),
    Task("cabinet", "WEB", "CONTENT", None, (("FILE_KEY", FK),)),
    Task("research", "WEB", "RESEARCH", None, (("QUESTION", "q"),)),
    Task("result", "WEB", "RESEARCH", None, (("JOB_ID", "rj_0"),)),
    Task("cron", "TOOL", "CRON_RESULT", None, (("ACTION", "list"),)),
    Task("cron", "TOOL", "CRON_RESULT", None, (("ACTION", "run"), ("JOB_ID", "j"))),
    Task("canvas", "TOOL", "CANVAS_RESULT", None, (("ACTION", "snapshot"),)),
    Task("fetch", "WEB", "CONTENT", None, (("URL", "https://a.test/"), ("BOARD", "true"))),
]


@pytest.mark.parametrize("task", _PER_UID_CALLS, ids=lambda task: task.req)
def test_a_call_of_per_uid_state_is_refused_for_another_uid_and_run_for_the_owner(
    task: Task,
) -> None:
    """Boards, the cabinet, research jobs, cron jobs, canvases: the face owner's, never
    another uid's through the face (a board listed root's fileKeys to uid 65534)."""
    why = foreign_refusal(task, OTHER, ME)
    assert why is not None
    assert why.startswith(f"{task.req}")
    assert f"calls the daemon as uid {ME}, not uid {OTHER}" in why
    assert foreign_refusal(task, None, ME) is not None
    assert foreign_refusal(task, ME, ME) is None


_NAVIGATED = Reply(
    Status.OK,
    (
        ("SCOPE", "[browser]"),
        ("DATA", "action:navigate,url:https://a.test/"),
        ("URL", "https://a.test/"),
        ("SESSION", "s"),
    ),
)


async def _call_over_http(
    socket_path: str, admit: Admit, arguments: dict[str, Any]
) -> tuple[CallToolResult, list[Task]]:
    """``tool_browser`` with ``arguments`` through the HTTP face on ``socket_path``, whose
    connections ``admit`` admits; the result and the tasks the daemon was sent."""
    tools = build_tools(
        [op.describe() for op in op_table((BROWSER,))], exec_configured=False, max_timeout_ms=1000
    )
    daemon = ScriptedDaemon(_NAVIGATED)
    server = build_server(daemon, ToolSet(tools), max_timeout_ms=1000)
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            where = await nursery.start(partial(_serve_http, server, socket_path, admit))
            async with http_client(where) as client:
                result = await client.call_tool("tool_browser", arguments)
            nursery.cancel_scope.cancel()
    assert isinstance(result, CallToolResult)
    return result, daemon.tasks


async def test_the_face_owners_session_call_over_http_reaches_the_daemon(
    sock_dir: str,
) -> None:
    """The real gate, admitting another uid too (``socket.allowed_uids``): our own connection
    is admitted as our uid and its SESSION call is sent."""
    gate = uid_gate(lambda: frozenset({ME, OTHER}))
    path = os.path.join(sock_dir, "face.sock")
    result, tasks = await _call_over_http(path, gate, {"action": "navigate", "session": "s"})
    assert not result.is_error
    assert [task.req for task in tasks] == ["browser"]
    assert ("SESSION", "s") in tasks[0].fields


async def test_a_connection_admitted_as_another_uid_gets_permission_denied_and_no_task(
    sock_dir: str,
) -> None:
    """A gate that admits the peer as another uid (we cannot connect as one in a test): the
    uid is carried from the gate to the call, which is refused before the daemon sees it."""

    async def as_other(stream: trio.SocketStream) -> str | int:
        return OTHER

    path = os.path.join(sock_dir, "face.sock")
    result, tasks = await _call_over_http(path, as_other, {"action": "navigate", "session": "s"})
    assert result.is_error
    assert result.structured_content is not None
    error = result.structured_content["ERROR"]
    assert error.startswith("permission_denied:browser SESSION: this state is kept per uid")
    assert tasks == []


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("web_board", {}),
        ("web_save", {"file_key": FK}),
        ("web_cabinet", {"file_key": FK}),
        ("web_result", {"job_id": "rj_0"}),
        ("tool_cron", {"action": "list"}),
        ("tool_canvas", {"action": "snapshot"}),
    ],
)
async def test_per_uid_tools_over_http_are_refused_for_another_uid_and_answered_for_the_owner(
    sock_dir: str, tool: str, arguments: dict[str, Any]
) -> None:
    """Through the real HTTP face: another uid's call is permission_denied and never sent;
    the owner's reaches the daemon and is answered."""

    async def as_other(stream: trio.SocketStream) -> str | int:
        return OTHER

    path = os.path.join(sock_dir, "face.sock")
    refused, sent = await _tool_over_http(path, as_other, tool, arguments)
    assert refused.is_error
    assert refused.structured_content is not None
    assert refused.structured_content["ERROR"].startswith("permission_denied:")
    assert sent == []
    own = os.path.join(sock_dir, "own.sock")
    answered, sent = await _tool_over_http(
        own, uid_gate(lambda: frozenset({ME, OTHER})), tool, arguments
    )
    assert not answered.is_error
    assert len(sent) == 1


async def _tool_over_http(
    socket_path: str, admit: Admit, tool: str, arguments: dict[str, Any]
) -> tuple[CallToolResult, list[Task]]:
    tools = build_tools(
        [op.describe() for op in op_table((BROWSER, WEB, TOOL))],
        exec_configured=False,
        max_timeout_ms=1000,
    )
    daemon = ScriptedDaemon(Reply(Status.OK, (("DATA", "ok"),)))
    server = build_server(daemon, ToolSet(tools), max_timeout_ms=1000)
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            where = await nursery.start(partial(_serve_http, server, socket_path, admit))
            async with http_client(where) as client:
                result = await client.call_tool(tool, arguments)
            nursery.cancel_scope.cancel()
    assert isinstance(result, CallToolResult)
    return result, daemon.tasks
