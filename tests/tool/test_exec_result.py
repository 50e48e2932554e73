"""Reading exits: wait statuses, the limits a signal points to, GNU time's report, failures."""

from __future__ import annotations

import signal

import pytest

from protocol import ErrorCode
from specialists.tool.exec import ExecResult, Limit
from specialists.tool.exec._result import describe_status, limits_from_signal, parse_time_report


def result(**changes: object) -> ExecResult:
    fields: dict[str, object] = {
        "command": "npm test", "program": "npm", "argv": ("/usr/bin/npm", "test"),
        "working_dir": "/ws", "sandbox": "bwrap", "limits_by": "cgroup2", "timeout_ms": 30_000,
        "exit_code": 0,
        "signal": None, "limits": frozenset(), "duration_ms": 5, "cpu_ms": 1,
        "peak_rss_kib": 1, "stdout": "", "stderr": "", "stdout_bytes": 0, "stderr_bytes": 0,
        "stdout_summary": "", "stderr_summary": "",
    }  # fmt: skip
    fields.update(changes)
    return ExecResult(**fields)  # type: ignore[arg-type]


def test_normal_exit_status_is_its_code_without_a_signal() -> None:
    assert describe_status(0) == (0, None)
    assert describe_status(1 << 8) == (1, None)


def test_death_by_signal_status_is_128_plus_n() -> None:
    assert describe_status(signal.SIGKILL) == (137, 9)


def test_exit_code_above_128_passed_on_by_bwrap_reads_as_that_signal() -> None:
    assert describe_status(152 << 8) == (152, signal.SIGXCPU)


def test_exit_code_128_itself_is_no_signal() -> None:
    assert describe_status(128 << 8) == (128, None)


def test_sigxfsz_points_to_the_file_size_limit() -> None:
    assert limits_from_signal(signal.SIGXFSZ, cpu_ms=0, cpu_limit_s=30) == {Limit.FILE_SIZE}


def test_sigkill_after_the_cpu_soft_limit_is_the_hard_cpu_limit() -> None:
    assert limits_from_signal(signal.SIGKILL, cpu_ms=30_000, cpu_limit_s=30) == {Limit.CPU}
    assert limits_from_signal(signal.SIGKILL, cpu_ms=29_999, cpu_limit_s=30) == set()


def test_time_report_is_read_from_its_last_line_whatever_came_before() -> None:
    assert parse_time_report("junk 1.00 1.00 1\n0.12 0.03 2048\n") == (150, 2048)


def test_missing_time_report_gives_no_figures() -> None:
    assert parse_time_report("") == (None, None)


def test_output_cap_alone_does_not_fail_the_command() -> None:
    capped = result(limits=frozenset({Limit.OUTPUT}))
    assert capped.ok
    assert capped.failure() is None


def test_failure_data_names_each_limit_after_the_exit_code() -> None:
    error = result(exit_code=153, signal=25, limits=frozenset({Limit.FILE_SIZE, Limit.OUTPUT}))
    failure = error.failure()
    assert failure is not None
    assert (failure.code, failure.data) == (
        ErrorCode.COMMAND_FAILED,
        "exit:153,limit:file_size,limit:output",
    )


@pytest.mark.parametrize(
    "forged",
    ["0.00 0.00 " + "9" * 5000 + "\n", "0.00 0.00 ١٢\n", "0.00 0.00 99999999999999999999\n"],
)
def test_a_time_report_line_no_gnu_time_writes_gives_no_figures(forged: str) -> None:
    # The command inherits the report's file: its own line must not raise, nor count.
    assert parse_time_report(forged) == (None, None)
