"""The exec op with a network rule, composed as the daemon composes it (``open_exec_services``:
exec's own guard proxy, judging by ``web.guard``): refusals come back as NETWORK_REFUSED
fields, on OK and FAIL replies alike, and a command without the rule replies as before."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import pytest
import trio

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config, with_section
from csp_web.core.api.context import Peer
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.memory.outbox import open_outbox
from protocol import Reply, Status, Task
from specialists.tool import TOOL
from specialists.tool.config import ToolConfig
from specialists.tool.exec._network import MAX_REPLY_REFUSALS
from specialists.tool.exec.config import ProgramRule
from specialists.tool.ops_exec import open_exec_services
from specialists.tool.services import ToolServices
from tests.harness import build_dispatcher
from tests.tool.exec_support import IS_ROOT, NOBODY, make_config, scratch_dir

# Fetches each URL through the proxy variables; exits 3 when any was refused (0 with -k).
_FETCH = (
    "import sys, urllib.request\n"
    "failed = 0\n"
    "for url in sys.argv[1:]:\n"
    "    if url == '-k':\n"
    "        sys.exit(0)\n"
    "    try:\n"
    "        urllib.request.urlopen(url, timeout=10)\n"
    "    except Exception:\n"
    "        failed = 3\n"
    "sys.exit(failed)\n"
)


@pytest.fixture
def workspace() -> Iterator[str]:
    with scratch_dir() as path:
        script = os.path.join(path, "fetch.py")
        with open(script, "w") as f:
            f.write(_FETCH)
        if IS_ROOT:
            os.chown(script, NOBODY, NOBODY)
        yield path


@pytest.fixture
async def dispatcher(config: Config, workspace: str) -> AsyncIterator[Dispatcher]:
    base = make_config(workspace, network_max_connections=4)
    rule = ProgramRule("python3", network=("registry.example",))
    exec_config = replace(base, allowed_programs=(rule, *base.allowed_programs))
    config = with_section(config, "tool", ToolConfig(exec=exec_config))
    async with (
        open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
        open_exec_services(config) as services,
    ):
        yield build_dispatcher(
            config, outbox_path(config, outbox), TOOL.ops, ToolServices(services, None, None)
        )


async def _exec(dispatcher: Dispatcher, command: str) -> Reply:
    task = Task("exec", "SHELL", "EXEC_RESULT", command, ())
    return await dispatcher.run(task, Peer("t", 1000, 4242))


async def test_a_refused_destination_is_named_on_the_failed_reply(
    dispatcher: Dispatcher,
) -> None:
    urls = "http://other.example/ https://10.0.0.1/ http://other.example/again"
    reply = await _exec(dispatcher, f"python3 fetch.py {urls}")
    assert reply.status is Status.FAIL, reply
    assert reply.get("ERROR") == f"command_failed:python3 fetch.py {urls}"
    assert reply.get("DATA") == "exit:3"
    assert reply.get_all("NETWORK_REFUSED") == [  # once per destination and reason
        "other.example:80 url_rejected:not-in-network-rule",
        "10.0.0.1:443 url_rejected:not-in-network-rule",
    ]


async def test_a_command_that_reaches_nothing_refused_replies_without_the_field(
    dispatcher: Dispatcher,
) -> None:
    reply = await _exec(dispatcher, "python3 fetch.py")
    assert reply.status is Status.OK, reply
    assert reply.get_all("NETWORK_REFUSED") == []
    assert [name for name, _ in reply.fields][-3:] == ["SANDBOX", "LIMITS", "LOG_PATH"]


async def test_a_refused_destination_is_named_on_an_ok_reply_too(dispatcher: Dispatcher) -> None:
    reply = await _exec(dispatcher, "python3 fetch.py http://other.example:8080/ -k")
    assert reply.status is Status.OK, reply
    assert reply.get_all("NETWORK_REFUSED") == [
        "other.example:8080 url_rejected:not-in-network-rule"
    ]


async def test_a_networked_command_cannot_reach_the_daemons_unix_sockets(
    dispatcher: Dispatcher, config: Config
) -> None:
    path = config.memory.socket_path  # a socket of the daemon's, listening for this test
    assert path is not None
    with trio.socket.socket(trio.socket.AF_UNIX) as listener:
        await listener.bind(path)
        listener.listen(1)
        probe = f"import socket; socket.socket(socket.AF_UNIX).connect({path!r})"
        reply = await _exec(dispatcher, f'python3 -c "{probe}"')
    assert reply.status is Status.FAIL
    assert "FileNotFoundError" in (reply.get("STDERR_SUMMARY") or "")
    assert reply.get_all("NETWORK_REFUSED") == []


@pytest.mark.parametrize(("ok", "status"), [("", Status.FAIL), (" -k", Status.OK)])
async def test_refusals_past_the_lines_shown_are_counted_on_the_reply(
    dispatcher: Dispatcher, ok: str, status: Status
) -> None:
    urls = " ".join(f"http://h{n}.example/" for n in range(MAX_REPLY_REFUSALS + 3))
    reply = await _exec(dispatcher, f"python3 fetch.py {urls} http://h0.example/{ok}")
    assert reply.status is status, reply
    assert reply.get_all("NETWORK_REFUSED") == [
        f"h{n}.example:80 url_rejected:not-in-network-rule" for n in range(MAX_REPLY_REFUSALS)
    ]
    assert reply.get("NETWORK_REFUSED_MORE") == "3"  # h0 again is one of the lines shown
