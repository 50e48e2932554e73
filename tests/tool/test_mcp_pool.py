"""The MCP pool against a real server: the toy server, spawned over stdio by the SDK."""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path

import pytest
import sniffio
import trio
import trio.testing

from csp_web.config import Config, with_section
from csp_web.core.api.errors import OpError
from protocol import ErrorCode
from specialists.tool.config import ToolConfig
from specialists.tool.mcp import McpPool, open_mcp_pool
from specialists.tool.mcp.config import McpConfig, StdioServerConfig
from specialists.tool.mcp.session import STDERR_BURST, STDERR_LINES_PER_S, LineBudget
from specialists.tool.services import open_mcp_host
from tests.conftest import wait_until

from .mcp_servers.support import process_exists, toy_config, toy_stdio

HERE = Path(__file__).resolve().parent / "mcp_servers"

# Generous bounds on whole tests: they catch a wedge, they time nothing.
WEDGE_S = 30.0


def reason(error: OpError) -> str:
    """The REASON of an MCP_UNAVAILABLE error (its only field)."""
    [(name, value)] = error.fields
    assert name == "REASON"
    return value


async def test_sdk_client_runs_on_trio_through_anyio() -> None:
    assert sniffio.current_async_library() == "trio"
    async with open_mcp_pool(toy_config()) as pool:
        result = await pool.call_tool("toy", "echo", {"text": "hi"})
    assert result.data == "hi"


async def test_first_call_starts_the_server_and_later_calls_reuse_its_process() -> None:
    async with open_mcp_pool(toy_config()) as pool:
        assert pool.stats()["toy"].state == "idle"
        first = await pool.call_tool("toy", "pid", {})
        second = await pool.call_tool("toy", "pid", {})
        stats = pool.stats()["toy"]
    assert first.data == second.data
    assert (stats.state, stats.calls, stats.restarts, stats.in_flight) == ("running", 2, 0, 0)


async def test_concurrent_calls_share_one_server_process() -> None:
    pids: list[str] = []
    async with open_mcp_pool(toy_config()) as pool:

        async def call() -> None:
            pids.append((await pool.call_tool("toy", "pid", {})).data)

        async with trio.open_nursery() as nursery:
            for _ in range(10):
                nursery.start_soon(call)
        assert pool.stats()["toy"].calls == 10
    assert len(pids) == 10
    assert len(set(pids)) == 1


async def test_text_becomes_data_followed_by_exec_time_and_structured_json() -> None:
    async with open_mcp_pool(toy_config()) as pool:
        result = await pool.call_tool("toy", "echo", {"text": "hello world"})
    assert (result.scope, result.data, result.truncated) == (("toy",), "hello world", False)
    assert [name for name, _ in result.fields()] == ["EXEC_TIME", "STRUCTURED"]
    assert dict(result.fields())["STRUCTURED"] == '{"result":"hello world"}'
    assert int(dict(result.fields())["EXEC_TIME"]) == result.exec_time_ms >= 0


async def test_structured_content_is_compact_json_with_sorted_keys() -> None:
    async with open_mcp_pool(toy_config()) as pool:
        result = await pool.call_tool("toy", "add", {"a": 2, "b": 3})
    assert result.structured_json == '{"a":2,"b":3,"sum":5}'
    assert json.loads(result.data) == {"sum": 5, "a": 2, "b": 3}


async def test_long_text_is_capped_with_a_note_of_its_full_length() -> None:
    async with open_mcp_pool(toy_config()) as pool:
        result = await pool.call_tool("toy", "big", {"chars": 10_000})
    assert len(result.data) == 2000
    assert result.text_chars == 10_000
    fields = dict(result.fields())
    assert fields["TEXT_CHARS"] == "10000"
    # The structured copy is past max_structured_chars: left out, its length noted.
    assert "STRUCTURED" not in fields
    assert int(fields["STRUCTURED_CHARS"]) > 10_000


async def test_error_result_raises_mcp_tool_error_carrying_its_text() -> None:
    async with open_mcp_pool(toy_config()) as pool:
        with pytest.raises(OpError) as failed:
            await pool.call_tool("toy", "fail", {"message": "disk on fire"})
    error = failed.value
    assert (error.code, error.detail, error.scope) == (ErrorCode.MCP_TOOL_ERROR, "fail", ("toy",))
    assert [name for name, _ in error.fields] == ["ERROR_SUMMARY", "EXEC_TIME"]
    assert "disk on fire" in dict(error.fields)["ERROR_SUMMARY"]


async def test_arguments_the_tool_rejects_raise_mcp_tool_error() -> None:
    async with open_mcp_pool(toy_config()) as pool:
        with pytest.raises(OpError) as failed:
            await pool.call_tool("toy", "echo", {"text": {"not": "a string"}})
    assert (failed.value.code, failed.value.detail) == (ErrorCode.MCP_TOOL_ERROR, "echo")


async def test_unknown_tool_raises_mcp_tool_error() -> None:
    async with open_mcp_pool(toy_config()) as pool:
        with pytest.raises(OpError) as failed:
            await pool.call_tool("toy", "no_such_tool", {})
    assert (failed.value.code, failed.value.detail) == (ErrorCode.MCP_TOOL_ERROR, "no_such_tool")


async def test_unknown_server_is_mcp_unavailable_not_configured_as_the_seed_says() -> None:
    async with open_mcp_pool(toy_config()) as pool:
        with pytest.raises(OpError) as failed:
            await pool.call_tool("playwright", "click", {})
        with pytest.raises(OpError) as listing:
            await pool.list_tools("playwright")
    for error in (failed.value, listing.value):
        assert (error.code, error.detail) == (ErrorCode.MCP_UNAVAILABLE, "playwright")
        assert error.fields == (("REASON", "not_configured"),)


@pytest.mark.parametrize("params", [[1, 2], "text", 3, None, {1: "int key"}, {"x": {1, 2}}])
async def test_params_that_are_not_a_json_object_raise_invalid_field_without_a_start(
    params: object,
) -> None:
    async with open_mcp_pool(toy_config()) as pool:
        with pytest.raises(OpError) as failed:
            await pool.call_tool("toy", "echo", params)  # type: ignore[arg-type]
        assert pool.stats()["toy"].state == "idle"
    assert (failed.value.code, failed.value.detail) == (ErrorCode.INVALID_FIELD, "PARAMS")


@pytest.mark.parametrize("tool", ["", "x" * 129, "two words", "line\nbreak"])
async def test_tool_name_that_cannot_be_one_raises_invalid_field(tool: str) -> None:
    async with open_mcp_pool(toy_config()) as pool:
        with pytest.raises(OpError) as failed:
            await pool.call_tool("toy", tool, {})
        assert pool.stats()["toy"].state == "idle"
    assert (failed.value.code, failed.value.detail) == (ErrorCode.INVALID_FIELD, "TOOL")


async def test_tool_name_of_128_characters_is_sent_to_the_server() -> None:
    async with open_mcp_pool(toy_config()) as pool:
        with pytest.raises(OpError) as failed:
            await pool.call_tool("toy", "x" * 128, {})
    assert failed.value.code == ErrorCode.MCP_TOOL_ERROR  # the server's "unknown tool"


async def test_list_tools_gives_each_tool_with_its_input_schema() -> None:
    async with open_mcp_pool(toy_config()) as pool:
        listing = await pool.list_tools("toy")
    tools = {tool.name: tool for tool in listing.tools}
    assert {"echo", "add", "fail", "hang", "crash", "pid"} <= set(tools)
    assert tools["echo"].description == "Return ``text`` unchanged."
    assert tools["echo"].input_schema["properties"]["text"]["type"] == "string"
    assert tools["add"].input_schema["required"] == ["a", "b"]
    assert listing.data == f"tools:{len(tools)}"


async def test_tool_listing_renders_one_json_line_per_tool() -> None:
    config = toy_config(max_listed_tools=3)
    async with open_mcp_pool(config) as pool:
        listing = await pool.list_tools("toy")
    fields = listing.fields(config)
    assert fields[0][0] == "EXEC_TIME"
    lines = [json.loads(value) for name, value in fields if name == "TOOL"]
    assert len(lines) == 3
    assert all(set(line) == {"name", "description", "input_schema"} for line in lines)
    assert fields[-1] == ("TOOLS_LISTED", "3")


async def test_crashed_server_is_restarted_after_backoff_in_a_new_process() -> None:
    async with open_mcp_pool(toy_config()) as pool:
        before = await pool.call_tool("toy", "pid", {})
        with pytest.raises(OpError) as crashed:
            await pool.call_tool("toy", "crash", {})
        assert pool.stats()["toy"].state in ("stopping", "backoff", "starting")
        with trio.fail_after(WEDGE_S):
            after = await pool.call_tool("toy", "pid", {})
        stats = pool.stats()["toy"]
    assert (crashed.value.code, crashed.value.detail) == (ErrorCode.MCP_UNAVAILABLE, "toy")
    assert crashed.value.fields == (("REASON", "connection_lost"),)
    assert after.data != before.data
    assert not process_exists(int(before.data))
    assert (stats.state, stats.restarts) == ("running", 1)
    assert "closed" in stats.last_error


async def test_a_line_that_is_not_utf8_on_stdout_is_skipped_and_the_call_answers() -> None:
    """Stray bytes once ended the SDK's reader without ending the stream: the call waited
    for its whole timeout and was answered call_timeout, a wrong cause."""
    raw = StdioServerConfig(command=sys.executable, args=(str(HERE / "raw_server.py"),))
    async with open_mcp_pool(toy_config(servers={"raw": raw})) as pool:
        with trio.fail_after(WEDGE_S):
            garbled = await pool.call_tool("raw", "garble", {}, timeout_s=10)
            again = await pool.call_tool("raw", "garble", {}, timeout_s=10)
        stats = pool.stats()["raw"]
    assert (garbled.data, again.data) == ("clean", "clean")
    assert (stats.state, stats.restarts) == ("running", 0)


async def test_hung_call_fails_within_its_deadline_and_the_next_call_works() -> None:
    async with open_mcp_pool(toy_config()) as pool:
        before = await pool.call_tool("toy", "pid", {})
        with trio.fail_after(WEDGE_S), pytest.raises(OpError) as hung:
            await pool.call_tool("toy", "hang", {}, timeout_s=0.5)
        with trio.fail_after(WEDGE_S):
            after = await pool.call_tool("toy", "pid", {})
        stats = pool.stats()["toy"]
    assert (hung.value.code, hung.value.fields) == (
        ErrorCode.MCP_UNAVAILABLE,
        (("REASON", "call_timeout"),),
    )
    # A slow tool is not a dead server: the probe passed, the process stayed.
    assert after.data == before.data
    assert stats.restarts == 0


@pytest.mark.slow
async def test_wedged_server_is_replaced_before_the_next_call_runs() -> None:
    async with open_mcp_pool(toy_config(probe_timeout_s=0.5)) as pool:
        before = await pool.call_tool("toy", "pid", {})
        with trio.fail_after(WEDGE_S), pytest.raises(OpError) as frozen:
            await pool.call_tool("toy", "freeze", {}, timeout_s=0.5)
        with trio.fail_after(WEDGE_S):
            after = await pool.call_tool("toy", "pid", {})
        stats = pool.stats()["toy"]
    assert frozen.value.fields == (("REASON", "call_timeout"),)
    assert after.data != before.data
    assert not process_exists(int(before.data))
    assert stats.restarts == 1
    assert "probe" in stats.last_error


async def test_unstartable_server_fails_promptly_with_mcp_unavailable() -> None:
    missing = StdioServerConfig(command="/nonexistent/mcp-server")
    async with open_mcp_pool(toy_config(servers={"gone": missing})) as pool:
        with trio.fail_after(WEDGE_S), pytest.raises(OpError) as failed:
            await pool.call_tool("gone", "anything", {})
        stats = pool.stats()["gone"]
    assert (failed.value.code, failed.value.detail) == (ErrorCode.MCP_UNAVAILABLE, "gone")
    assert reason(failed.value).startswith("start_failed:FileNotFoundError: ")
    assert "/nonexistent/mcp-server" in reason(failed.value)
    assert stats.last_error in reason(failed.value)


async def test_server_that_never_answers_fails_at_the_start_deadline() -> None:
    silent = StdioServerConfig(command=sys.executable, args=("-c", "import time; time.sleep(60)"))
    config = toy_config(servers={"mute": silent}, start_timeout_s=0.5)
    async with open_mcp_pool(config) as pool:
        with trio.fail_after(WEDGE_S), pytest.raises(OpError) as failed:
            await pool.call_tool("mute", "anything", {})
    assert reason(failed.value) == "start_timeout:not ready within 0.5 s"


async def test_call_whose_deadline_is_shorter_than_the_backoff_fails_at_once() -> None:
    missing = StdioServerConfig(command="/nonexistent/mcp-server")
    config = toy_config(servers={"gone": missing}, backoff_initial_s=60.0, backoff_max_s=60.0)
    async with open_mcp_pool(config) as pool:
        with pytest.raises(OpError):
            await pool.call_tool("gone", "anything", {})
        await trio.testing.wait_all_tasks_blocked()
        assert pool.stats()["gone"].state == "backoff"
        with trio.fail_after(WEDGE_S), pytest.raises(OpError) as failed:
            await pool.call_tool("gone", "anything", {}, timeout_s=5.0)
    assert reason(failed.value).startswith("backing_off:FileNotFoundError: ")


async def test_env_from_hands_the_named_variable_to_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CSP_TEST_SECRET", "s3cret")
    server = StdioServerConfig(
        command=sys.executable,
        args=toy_stdio().args,
        env={"PLAIN": "visible"},
        env_from={"TOKEN": "CSP_TEST_SECRET"},
    )
    async with open_mcp_pool(toy_config(servers={"toy": server})) as pool:
        token = await pool.call_tool("toy", "getenv", {"name": "TOKEN"})
        plain = await pool.call_tool("toy", "getenv", {"name": "PLAIN"})
        leaked = await pool.call_tool("toy", "getenv", {"name": "CSP_TEST_SECRET"})
    assert (token.data, plain.data, leaked.data) == ("s3cret", "visible", "")


async def test_missing_secret_makes_the_server_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CSP_TEST_ABSENT", raising=False)
    server = StdioServerConfig(
        command=sys.executable, args=toy_stdio().args, env_from={"TOKEN": "CSP_TEST_ABSENT"}
    )
    async with open_mcp_pool(toy_config(servers={"toy": server})) as pool:
        with pytest.raises(OpError) as failed:
            await pool.call_tool("toy", "pid", {})
        stats = pool.stats()["toy"]
    assert reason(failed.value) == "start_failed:MissingSecretError: CSP_TEST_ABSENT"
    assert "CSP_TEST_ABSENT" in stats.last_error


async def test_closing_the_pool_reaps_every_server_process() -> None:
    config = toy_config(servers={"one": toy_stdio(), "two": toy_stdio()})
    async with open_mcp_pool(config) as pool:
        pids = [int((await pool.call_tool(name, "pid", {})).data) for name in ("one", "two")]
        assert all(process_exists(pid) for pid in pids)
    assert not any(process_exists(pid) for pid in pids)
    assert {stats.state for stats in pool.stats().values()} == {"closed"}


async def test_cancelling_the_pool_owner_reaps_the_server_process() -> None:
    pids: list[int] = []
    with trio.CancelScope() as scope:
        async with open_mcp_pool(toy_config()) as pool:
            pids.append(int((await pool.call_tool("toy", "pid", {})).data))
            scope.cancel()
            await trio.sleep_forever()
    assert pids
    assert not process_exists(pids[0])


async def test_call_after_the_pool_closed_raises_shutting_down() -> None:
    async with open_mcp_pool(toy_config()) as pool:
        pass
    with pytest.raises(OpError) as failed:
        await pool.call_tool("toy", "pid", {})
    assert (failed.value.code, failed.value.detail) == (ErrorCode.SHUTTING_DOWN, "toy")


async def test_error_inside_the_pool_block_reaches_the_caller_unwrapped() -> None:
    with pytest.raises(KeyError):
        async with open_mcp_pool(toy_config()):
            raise KeyError("mine")


async def test_a_server_that_dies_at_start_reports_its_last_stderr_line_as_the_cause() -> None:
    dying = StdioServerConfig(
        command=sys.executable,
        args=("-c", "import sys; sys.stderr.write('error: no API key set\\n'); sys.exit(1)"),
    )
    async with open_mcp_pool(toy_config(servers={"dying": dying})) as pool:
        with trio.fail_after(WEDGE_S), pytest.raises(OpError) as failed:
            await pool.call_tool("dying", "anything", {})
    assert reason(failed.value).startswith("start_failed:")
    assert reason(failed.value).endswith("(stderr: error: no API key set)")


async def test_a_server_that_fails_max_failures_starts_in_a_row_is_given_up_on() -> None:
    """Issue 8.17: retries are capped (here 3, at N-1 still retrying, at N failed for good)."""
    missing = StdioServerConfig(command="/nonexistent/mcp-server")
    async with open_mcp_pool(toy_config(servers={"gone": missing}, max_failures=3)) as pool:
        states = []
        for _ in range(3):
            with trio.fail_after(WEDGE_S), pytest.raises(OpError) as failed:
                await pool.call_tool("gone", "anything", {}, timeout_s=WEDGE_S)
            assert reason(failed.value).startswith("start_failed:FileNotFoundError: ")
            await trio.testing.wait_all_tasks_blocked()
            states.append(pool.stats()["gone"].state)
        with trio.fail_after(WEDGE_S), pytest.raises(OpError) as later:
            await pool.call_tool("gone", "anything", {}, timeout_s=WEDGE_S)
        stats = pool.stats()["gone"]
        lines = [json.loads(line) for line in pool.stats_lines()]
    assert states == ["backoff", "backoff", "failed"]
    assert reason(later.value) == reason(failed.value)
    assert (stats.state, stats.failures, stats.restarts, stats.calls) == ("failed", 3, 2, 4)
    assert lines == [
        {
            "server": "gone",
            "state": "failed",
            "calls": 4,
            "restarts": 2,
            "in_flight": 0,
            "last_error": stats.last_error,
            "failures": 3,
        }
    ]


async def test_a_healthy_run_resets_the_failure_count() -> None:
    async with open_mcp_pool(toy_config(max_failures=1, backoff_reset_after_s=0.001)) as pool:
        with pytest.raises(OpError):
            await pool.call_tool("toy", "crash", {})
        with trio.fail_after(WEDGE_S):
            after = await pool.call_tool("toy", "pid", {})
        stats = pool.stats()["toy"]
    assert after.data
    assert (stats.state, stats.failures, stats.restarts) == ("running", 0, 1)


async def test_server_stderr_lines_become_log_records_naming_the_server(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="specialists.tool.mcp")
    async with open_mcp_pool(toy_config()) as pool:
        with trio.fail_after(WEDGE_S):
            await pool.call_tool("toy", "complain", {"text": "first line\nsecond {json?"})
    relayed = [r for r in caplog.records if getattr(r, "server", None) == "toy"]
    assert [r.getMessage() for r in relayed][-2:] == [
        "MCP server toy stderr: first line",
        "MCP server toy stderr: second {json?",
    ]


def test_a_line_budget_takes_its_burst_then_one_line_per_refill_and_counts_the_rest() -> None:
    now = [0.0]
    budget = LineBudget(per_s=20, burst=3, clock=lambda: now[0])
    assert [budget.take() for _ in range(4)] == [True, True, True, False]  # N, then N+1
    assert budget.skipped == 1
    now[0] += 0.05  # one line's worth
    assert (budget.take(), budget.take(), budget.skipped) == (True, False, 2)
    now[0] += 3600  # refills to the burst, never past it
    assert [budget.take() for _ in range(4)] == [True, True, True, False]


async def test_a_server_printing_without_end_is_logged_at_its_line_budget(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A flood of stderr lines is logged up to the burst (then the rate); the lines left out
    are told as a count with the next line logged."""
    caplog.set_level(logging.INFO, logger="specialists.tool.mcp")
    flood = "\n".join(f"line {n}" for n in range(STDERR_BURST * 5))
    async with open_mcp_pool(toy_config()) as pool:
        with trio.fail_after(WEDGE_S):
            await pool.call_tool("toy", "complain", {"text": flood})
            await trio.sleep(1 / STDERR_LINES_PER_S * 2)  # a line's worth of budget again
            await pool.call_tool("toy", "complain", {"text": "after"})
    relayed = [r.getMessage() for r in caplog.records if getattr(r, "server", None) == "toy"]
    lines = [m for m in relayed if m.startswith("MCP server toy stderr: line ")]
    assert STDERR_BURST <= len(lines) < STDERR_BURST * 2
    assert lines[:2] == ["MCP server toy stderr: line 0", "MCP server toy stderr: line 1"]
    suffix = f"lines not logged (over {STDERR_LINES_PER_S:g} a second)"
    told = [int(m.split(": ")[1].split(" ")[0]) for m in relayed if m.endswith(suffix)]
    assert told  # the budget refills while lines arrive: each refill tells what it left out
    assert len(lines) + sum(told) == STDERR_BURST * 5  # every line logged or counted
    assert relayed[-2:] == [
        f"MCP server toy stderr: {told[-1]} {suffix}",
        "MCP server toy stderr: after",
    ]


# Reloads (issue 9.6): the pool's servers change in place, on SIGHUP.


async def _pid(pool: McpPool, server: str) -> int:
    with trio.fail_after(WEDGE_S):
        return int((await pool.call_tool(server, "pid", {})).data)


async def test_a_reload_adds_a_callable_server_and_keeps_the_unchanged_ones_session() -> None:
    async with open_mcp_pool(toy_config()) as pool:
        before = await _pid(pool, "toy")
        summary = pool.prepare_reload(
            toy_config(servers={"toy": toy_stdio(), "two": toy_stdio()})
        )()
        assert (summary.added, summary.removed, summary.changed) == (["two"], [], [])
        assert pool.servers == ("toy", "two")
        assert await _pid(pool, "toy") == before
        two = await _pid(pool, "two")
    assert two != before
    assert not process_exists(two)


async def test_a_reload_removing_a_server_lets_its_call_in_flight_finish_then_reaps_it(
    tmp_path: Path,
) -> None:
    release = tmp_path / "release"
    outcome: list[str] = []
    async with open_mcp_pool(toy_config()) as pool:
        pid = await _pid(pool, "toy")

        async def in_flight() -> None:
            result = await pool.call_tool("toy", "wait_for", {"path": str(release)})
            outcome.append(result.data)

        with trio.fail_after(WEDGE_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(in_flight)
                await wait_until(lambda: pool.stats()["toy"].in_flight == 1)
                summary = pool.prepare_reload(toy_config(servers={}))()
                assert summary.removed == ["toy"]
                with pytest.raises(OpError) as later:
                    await pool.call_tool("toy", "pid", {})
                assert process_exists(pid)  # still serving the call in flight
                release.touch()
            await wait_until(lambda: not process_exists(pid))
    assert outcome == ["released"]
    assert reason(later.value) == "not_configured"
    assert pool.servers == ()


async def test_a_reload_restarts_a_changed_server_in_a_new_process() -> None:
    async with open_mcp_pool(toy_config()) as pool:
        before = await _pid(pool, "toy")
        changed = dataclasses.replace(toy_stdio(), env={"CSP_TOY": "2"})
        summary = pool.prepare_reload(toy_config(servers={"toy": changed}))()
        assert summary.changed == ["toy"]
        after = await _pid(pool, "toy")
        value = (await pool.call_tool("toy", "getenv", {"name": "CSP_TOY"})).data
        with trio.fail_after(WEDGE_S):
            await wait_until(lambda: not process_exists(before))
    assert after != before
    assert value == "2"


async def test_a_reload_gives_a_server_given_up_on_a_fresh_start() -> None:
    missing = StdioServerConfig(command="/nonexistent/mcp-server")
    config = toy_config(servers={"gone": missing}, max_failures=1)
    async with open_mcp_pool(config) as pool:
        with trio.fail_after(WEDGE_S), pytest.raises(OpError):
            await pool.call_tool("gone", "anything", {}, timeout_s=WEDGE_S)
        await trio.testing.wait_all_tasks_blocked()
        assert pool.stats()["gone"].state == "failed"
        summary = pool.prepare_reload(config)()
        fresh = pool.stats()["gone"]
        with trio.fail_after(WEDGE_S), pytest.raises(OpError) as again:
            await pool.call_tool("gone", "anything", {}, timeout_s=WEDGE_S)
    assert summary.retried == ["gone"]
    assert (fresh.state, fresh.calls, fresh.failures) == ("idle", 0, 0)
    assert reason(again.value).startswith("start_failed:FileNotFoundError: ")


async def test_a_reload_that_changes_nothing_keeps_every_session() -> None:
    async with open_mcp_pool(toy_config()) as pool:
        before = await _pid(pool, "toy")
        summary = pool.prepare_reload(toy_config())()
        assert await _pid(pool, "toy") == before
    assert str(summary) == "no change"


async def test_the_first_server_a_reload_configures_opens_the_pool() -> None:
    async with open_mcp_host(McpConfig()) as host:
        assert host.pool is None
        assert host.stats_lines() == ()
        host.prepare_reload(with_section(Config(), "tool", ToolConfig(mcp=toy_config())))()
        assert host.pool is not None
        pid = await _pid(host.pool, "toy")
        [line] = host.stats_lines()
    assert json.loads(line)["state"] == "running"
    assert not process_exists(pid)
