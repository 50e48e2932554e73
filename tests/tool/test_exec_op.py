"""The exec op end to end: frame fields in, the real sandbox, seed-shaped replies, memory writes."""

from __future__ import annotations

import json
import resource
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, contextmanager

import pytest

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config, with_section
from csp_web.core.api.context import Peer
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.memory.outbox import open_outbox
from protocol import Reply, Status, Task
from specialists.tool import TOOL
from specialists.tool.config import ToolConfig
from specialists.tool.exec._request import MAX_ARG_STRLEN
from specialists.tool.ops_exec import open_exec_services
from specialists.tool.services import ToolServices
from tests.harness import build_dispatcher, outbox_of
from tests.tool.exec_support import make_config, scratch_dir


@pytest.fixture
def workspace() -> Iterator[str]:
    with scratch_dir() as path:
        yield path


@pytest.fixture
async def dispatcher(config: Config, workspace: str) -> AsyncIterator[Dispatcher]:
    exec_config = make_config(workspace, cache_safe_patterns=(r"cat .*",))
    config = with_section(config, "tool", ToolConfig(exec=exec_config))
    async with (
        open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
        open_exec_services(config) as services,
    ):
        yield build_dispatcher(
            config, outbox_path(config, outbox), TOOL.ops, ToolServices(services, None, None)
        )


async def _exec(dispatcher: Dispatcher, command: str, *fields: tuple[str, str]) -> Reply:
    task = Task("exec", "SHELL", "EXEC_RESULT", command, fields)
    return await dispatcher.run(task, Peer("t", 1000, 4242))


def _writes(dispatcher: Dispatcher, kind: str) -> list[str]:
    return [w.data for _, w in outbox_of(dispatcher)._store.oldest(1000) if w.type == kind]


async def test_exec_replies_with_seed_fields_and_logs_full_output_to_memory(
    dispatcher: Dispatcher,
) -> None:
    reply = await _exec(dispatcher, "python3 -c \"print('19 tests passed'); print('x' * 2000)\"")
    assert reply.status is Status.OK, reply
    assert reply.get("SCOPE") == "[python3]"
    assert reply.get("DATA") == "exit:0"
    assert int(reply.get("EXEC_TIME") or "x") >= 0
    summary = reply.get("STDOUT_SUMMARY") or ""
    assert summary.startswith("19 tests passed")
    assert len(summary) <= 500
    assert reply.get("STDERR_SUMMARY") == ""
    (log,) = _writes(dispatcher, "exec_log")
    assert "19 tests passed" in log
    assert "x" * 2000 in log  # the full output, not the summary
    (audit,) = [json.loads(a) for a in _writes(dispatcher, "audit")]
    assert audit["command"].startswith("python3 -c")
    assert (audit["uid"], audit["outcome"], audit["exit"]) == (1000, "OK", 0)
    # One audit per op; the bulky output is its own write, named by path.
    (log_path,) = [
        w.path for _, w in outbox_of(dispatcher)._store.oldest(1000) if w.type == "exec_log"
    ]
    assert audit["log"] == reply.get("LOG_PATH") == log_path


async def test_a_failed_commands_audit_names_its_exit_and_log_but_never_its_env(
    dispatcher: Dispatcher,
) -> None:
    env = ("ENV", json.dumps({"NODE_ENV": "tok-s3cret"}))
    reply = await _exec(dispatcher, 'python3 -c "import sys; sys.exit(3)"', env)
    assert (reply.get("ERROR") or "").startswith("command_failed:")
    (audit,) = [json.loads(a) for a in _writes(dispatcher, "audit")]
    assert (audit["outcome"], audit["exit"], audit["log"]) == ("FAIL", 3, reply.get("LOG_PATH"))
    assert all("tok-s3cret" not in w.data for _, w in outbox_of(dispatcher)._store.oldest(1000))


async def test_a_url_password_in_a_command_runs_but_its_audit_and_log_header_hide_it(
    dispatcher: Dispatcher,
) -> None:
    """The command runs as given; what memory keeps of it (the audit's command, the log's
    header) has the URL's userinfo written ``***@``."""
    reply = await _exec(dispatcher, "python3 -c pass https://user:s3cr3tpw-3x3c@host.test/x")
    assert reply.get("DATA") == "exit:0", reply
    (audit,) = [json.loads(a) for a in _writes(dispatcher, "audit")]
    assert audit["command"] == "python3 -c pass https://***@host.test/x"
    (log,) = _writes(dispatcher, "exec_log")
    assert "https://***@host.test/x" in log
    assert all("s3cr3tpw" not in w.data for _, w in outbox_of(dispatcher)._store.oldest(1000))


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ('{"LANG":"x","LANG":"y"}', 'invalid_field:ENV repeats the key "LANG"'),
        ('{"A":"1","B":"2","A":"1"}', 'invalid_field:ENV repeats the key "A"'),
        (
            '{"K' + "k" * 80 + '":"1","K' + "k" * 80 + '":"2"}',
            'invalid_field:ENV repeats the key "K' + "k" * 59 + "...",
        ),
    ],
)
async def test_env_naming_a_variable_twice_is_invalid_field_not_the_last_kept(
    dispatcher: Dispatcher, env: str, error: str
) -> None:
    """json keeps the last of a repeated key silently (review nit): refused before it runs."""
    reply = await _exec(dispatcher, "true", ("ENV", env))
    assert reply == Reply(Status.FAIL, (("SCOPE", "[]"), ("DATA", "none"), ("ERROR", error)))
    assert _writes(dispatcher, "exec") == []


@pytest.mark.parametrize("env", ['{"LANG":"\\ud800"}', '{"\\udfff":"x"}'])
async def test_env_with_a_lone_surrogate_is_invalid_field_before_it_runs(
    dispatcher: Dispatcher, env: str
) -> None:
    """V-2: Popen raised UnicodeEncodeError on the variable, answered internal_error."""
    reply = await _exec(dispatcher, "echo hi", ("ENV", env))
    error = "invalid_field:ENV holds a lone surrogate"
    assert reply == Reply(Status.FAIL, (("SCOPE", "[]"), ("DATA", "none"), ("ERROR", error)))
    assert _writes(dispatcher, "exec") == []


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("x" * (MAX_ARG_STRLEN - len("LANG=") - 1), True),
        ("x" * (MAX_ARG_STRLEN - len("LANG=")), False),
        ("\u00e9" * ((MAX_ARG_STRLEN - len("LANG=")) // 2) + "x", False),  # bytes, not chars
    ],
)
async def test_env_variable_past_execves_limit_for_one_string_is_invalid_field_naming_it(
    dispatcher: Dispatcher, value: str, ok: bool
) -> None:
    """E2BIG: a LANG of 200,000 characters answered command_failed:echo hi, DATA exit:null,
    with no cause. The kernel's MAX_ARG_STRLEN counts ``NAME=``, the value and its NUL."""
    reply = await _exec(dispatcher, "printenv LANG", ("ENV", json.dumps({"LANG": value})))
    if ok:
        assert (reply.status, reply.get("DATA")) == (Status.OK, "exit:0"), reply
        return
    error = f"invalid_field:ENV LANG too long for the kernel: over {MAX_ARG_STRLEN} bytes (E2BIG)"
    assert reply == Reply(Status.FAIL, (("SCOPE", "[shell]"), ("DATA", "none"), ("ERROR", error)))
    assert _writes(dispatcher, "exec_log") == []


@contextmanager
def _stack_limit(soft_bytes: int) -> Iterator[int]:
    """The daemon's stack rlimit lowered to ``soft_bytes`` (as a unit's LimitSTACK= would),
    which lowers the kernel's ARG_MAX to a quarter of it; yields that ARG_MAX."""
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    resource.setrlimit(resource.RLIMIT_STACK, (soft_bytes, hard))
    try:
        yield soft_bytes // 4
    finally:
        resource.setrlimit(resource.RLIMIT_STACK, (soft, hard))


async def test_env_past_the_kernels_arg_max_together_is_invalid_field_not_command_failed(
    dispatcher: Dispatcher,
) -> None:
    """E2BIG from the spawn itself (each variable fits, all of them do not) names ENV and
    the kernel's bound rather than answering command_failed with DATA exit:null."""
    value = "x" * 100_000
    env = json.dumps({"LANG": value, "LC_ALL": value, "TZ": value})
    with _stack_limit(1024 * 1024) as arg_max:
        reply = await _exec(dispatcher, "true", ("ENV", env))
    error = (
        f"invalid_field:ENV with COMMAND too long for the kernel: over ARG_MAX, {arg_max} bytes"
        " (E2BIG)"
    )
    assert reply == Reply(Status.FAIL, (("SCOPE", "[shell]"), ("DATA", "none"), ("ERROR", error)))


async def test_nonzero_exit_is_command_failed_with_stderr_summary(dispatcher: Dispatcher) -> None:
    reply = await _exec(dispatcher, "python3 -c \"import sys; sys.exit('no jest')\"")
    assert reply.status is Status.FAIL
    assert reply.get("SCOPE") == "[shell]"
    assert reply.get("DATA") == "exit:1"
    assert (reply.get("ERROR") or "").startswith("command_failed:python3")
    assert (reply.get("STDERR_SUMMARY") or "").strip() == "no jest"
    assert len(_writes(dispatcher, "exec_log")) == 1


async def test_failing_command_reply_carries_its_exit_code_and_stdout_summary(
    dispatcher: Dispatcher,
) -> None:
    """Issue 21 §3: the report pytest prints on stdout was dropped, EXIT_CODE never sent."""
    script = "import sys; print('1 failed, 19 passed'); sys.exit(3)"
    reply = await _exec(dispatcher, f'python3 -c "{script}"', ("ID", "f1"))
    assert reply == Reply(
        Status.FAIL,
        (
            ("ID", "f1"),
            ("SCOPE", "[shell]"),
            ("DATA", "exit:3"),
            ("ERROR", f'command_failed:python3 -c "{script}"'),
            ("EXIT_CODE", "3"),
            ("STDOUT_SUMMARY", "1 failed, 19 passed"),
            ("STDERR_SUMMARY", ""),
            ("LOG_PATH", reply.get("LOG_PATH") or "missing"),
        ),
    )


async def test_successful_command_reply_carries_exit_code_zero(dispatcher: Dispatcher) -> None:
    reply = await _exec(dispatcher, "true")
    assert reply.status is Status.OK, reply
    assert (reply.get("DATA"), reply.get("EXIT_CODE")) == ("exit:0", "0")


async def test_timeout_kills_and_replies_timeout_exceeded_with_exit_null(
    dispatcher: Dispatcher,
) -> None:
    reply = await _exec(dispatcher, "sleep 30", ("TIMEOUT_MS", "500"))
    assert reply.status is Status.FAIL
    assert (reply.get("ERROR") or "").startswith("timeout_exceeded:")
    assert reply.get("DATA") == "exit:null"
    assert reply.get("COMMAND") == "sleep 30"


@pytest.mark.parametrize(
    ("command", "code"),
    [
        ("rm -rf /", "command_blocked"),
        ("bash -c id", "command_blocked"),
        ("nosuchprogram", "command_blocked"),
    ],
)
async def test_refused_commands_never_run(dispatcher: Dispatcher, command: str, code: str) -> None:
    reply = await _exec(dispatcher, command)
    assert reply.status is Status.FAIL
    assert (reply.get("ERROR") or "").partition(":")[0] == code
    assert _writes(dispatcher, "exec_log") == []


async def test_working_dir_outside_the_workspace_is_permission_denied(
    dispatcher: Dispatcher,
) -> None:
    reply = await _exec(dispatcher, "id", ("WORKING_DIR", "/etc"))
    assert (reply.get("ERROR") or "").startswith("permission_denied:")
    assert reply.get("DATA") == "exit:126"


async def test_safe_command_is_answered_from_cache_the_second_time(
    dispatcher: Dispatcher, workspace: str
) -> None:
    first = await _exec(dispatcher, "cat /etc/hostname")
    second = await _exec(dispatcher, "cat /etc/hostname")
    assert first.get("CACHED") is None
    assert second.get("CACHED") == "true"
    assert second.get("STDOUT_SUMMARY") == first.get("STDOUT_SUMMARY")
    assert len(_writes(dispatcher, "exec_log")) == 1


async def test_host_unix_sockets_under_run_are_hidden(dispatcher: Dispatcher) -> None:
    """A network namespace does not cover socket files: /run is masked by default."""
    reply = await _exec(dispatcher, "ls -A /run")
    assert reply.status is Status.OK, reply
    assert reply.get("STDOUT_SUMMARY") == ""


async def test_reply_says_which_limits_bounded_the_command(dispatcher: Dispatcher) -> None:
    reply = await _exec(dispatcher, "true")
    assert reply.status is Status.OK, reply
    assert reply.get("SANDBOX") == "bwrap"
    assert reply.get("LIMITS") in ("cgroup1", "cgroup2")  # CI has a cgroup to give


async def test_stats_says_which_limits_exec_uses(config: Config, workspace: str) -> None:
    from specialists.tool import TOOL

    for mode, expected in (("auto", {"cgroup1", "cgroup2"}), ("off", {"rlimit"})):
        exec_config = make_config(workspace, cgroup=mode)
        tool = with_section(config, "tool", ToolConfig(exec=exec_config))
        async with AsyncExitStack() as stack:
            lines = dict((await TOOL.open(tool, stack)).stats_lines)
        assert lines["SANDBOX"] == "bwrap"
        assert lines["EXEC_LIMITS"] in expected
