"""What a command that ran produced, and the seed's FAIL reply for one that failed.

``run_command`` returns an ``ExecResult`` for every command it started, whatever its end;
``failure()`` is the one place that turns a non-zero exit or a timeout into the seed's reply
shapes, so the op can log the full result to ``exec_log`` and then raise the error.
"""

from __future__ import annotations

import enum
import os
import re
import signal
from dataclasses import dataclass

from csp_web.core.api.errors import OpError
from protocol import ErrorCode, NumberError, parse_decimal, parse_uint

from ._errors import SCOPE

_REPORT_LINE = re.compile(r"^([0-9]+\.[0-9]+) ([0-9]+\.[0-9]+) ([0-9]+)$", re.MULTILINE)


class Limit(enum.StrEnum):
    """A limit that ended or cut the command, as far as its exit shows it."""

    TIMEOUT = "timeout"  # the engine killed the tree at timeout_ms
    OUTPUT = "output"  # a stream passed max_output_bytes; the middle was dropped
    CPU = "cpu"  # RLIMIT_CPU: SIGXCPU, or SIGKILL at the hard limit
    FILE_SIZE = "file_size"  # RLIMIT_FSIZE: SIGXFSZ
    # The command's cgroup (limits_by cgroup1/cgroup2) saw these. Under RLIMIT_AS a memory
    # limit has no signal: malloc fails and the program reports it in its own words (exit 1
    # and MemoryError for Python), so it is not told apart from other failures.
    MEMORY = "memory"  # the cgroup's OOM killer killed a process of the command
    PROCESSES = "processes"  # pids.max refused a fork or a thread


@dataclass(frozen=True, slots=True)
class ExecResult:
    """One finished command.

    ``exit_code`` is None only when the engine killed it at the timeout (the seed's
    ``DATA exit:null``); a death by signal n reads as 128+n, the shell's convention, which is
    also what bwrap passes on, and ``signal`` then holds n. ``stdout``/``stderr`` are the kept
    output (at most ``max_output_bytes`` each) for the ``exec_log`` write; the summaries are at
    most ``summary_max_chars``. ``cpu_ms`` and ``peak_rss_kib`` cover the command and the
    children it reaped, as GNU time measures them inside the sandbox (user and system time
    each cut down to 10 ms); they are None when the tree was killed (timeout) or GNU time is
    missing.
    """

    command: str
    program: str  # what SCOPE names on success: the program as requested, or "shell"
    argv: tuple[str, ...]  # the resolved argv, before the sandbox's wrappers
    working_dir: str
    sandbox: str
    limits_by: str  # what bounded memory and tasks: "cgroup2", "cgroup1" or "rlimit"
    timeout_ms: int
    exit_code: int | None
    signal: int | None
    limits: frozenset[Limit]
    duration_ms: int
    cpu_ms: int | None
    peak_rss_kib: int | None
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    stdout_summary: str
    stderr_summary: str
    # What its network lane refused, ``<host>:<port> <code>:<detail>`` (_network.py).
    network_refused: tuple[str, ...] = ()
    network_refused_more: int = 0  # refused connections those lines do not stand for
    cpu_cut_ms: int | None = None  # killed at this CPU time, past the task's budget

    @property
    def ok(self) -> bool:
        """True for exit 0 within the timeout (an output cap alone does not fail a command)."""
        return self.exit_code == 0 and Limit.TIMEOUT not in self.limits

    def failure(self) -> OpError | None:
        """The seed's FAIL reply for this result, or None when ``ok``.

        Timeout: ``ERROR timeout_exceeded:<ms>ms``, ``DATA exit:null``, ``COMMAND``. Otherwise
        ``ERROR command_failed:<command>``, ``DATA exit:<code>`` (plus ``limit:<name>`` for each
        limit that fired), ``EXIT_CODE``, ``STDOUT_SUMMARY`` when the command wrote to stdout
        (pytest and npm print their failure report there), ``STDERR_SUMMARY``.
        """
        if Limit.TIMEOUT in self.limits:
            return OpError(
                ErrorCode.TIMEOUT_EXCEEDED,
                f"{self.timeout_ms}ms",
                scope=SCOPE,
                data="exit:null",
                fields=[("COMMAND", self.command), *self._refused_fields()],
            )
        if self.ok:
            return None
        data = ",".join([f"exit:{self.exit_code}", *(f"limit:{x}" for x in sorted(self.limits))])
        return OpError(
            ErrorCode.COMMAND_FAILED,
            self.command,
            scope=SCOPE,
            data=data,
            fields=[
                ("EXIT_CODE", str(self.exit_code)),
                *([("STDOUT_SUMMARY", self.stdout_summary)] if self.stdout_bytes else []),
                ("STDERR_SUMMARY", self.stderr_summary),
                *self._refused_fields(),
            ],
        )

    def _refused_fields(self) -> list[tuple[str, str]]:
        fields = [("NETWORK_REFUSED", line) for line in self.network_refused]
        more = self.network_refused_more
        return [*fields, ("NETWORK_REFUSED_MORE", str(more))] if more else fields


def parse_time_report(text: str) -> tuple[int | None, int | None]:
    """(CPU ms, peak RSS KiB) from GNU time's last ``user sys maxrss`` line, or (None, None)
    when there is none (the tree was killed first, or GNU time is not installed), or when the
    last line is not numbers GNU time could write: the command inherits the report's file and
    may write its own line there (thousands of digits made ``int()`` raise)."""
    found = _REPORT_LINE.findall(text)
    if not found:
        return None, None
    user, system, rss = found[-1]
    try:
        cpu_s = parse_decimal(user) + parse_decimal(system)
        return round(cpu_s * 1000), parse_uint(rss)
    except NumberError:
        return None, None


def describe_status(status: int) -> tuple[int, int | None]:
    """(exit code, signal) from a wait status, reading 128+n as signal n as shells do."""
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return 128 - code, -code
    if 128 < code < 128 + signal.NSIG:
        return code, code - 128
    return code, None


def limits_from_signal(signo: int | None, *, cpu_ms: int | None, cpu_limit_s: int) -> set[Limit]:
    """The rlimits a death by ``signo`` points to. A SIGKILL the engine did not send, after
    the CPU soft limit was spent, is the hard CPU limit."""
    if signo == signal.SIGXCPU:
        return {Limit.CPU}
    if signo == signal.SIGXFSZ:
        return {Limit.FILE_SIZE}
    if signo == signal.SIGKILL and cpu_ms is not None and cpu_ms >= cpu_limit_s * 1000:
        return {Limit.CPU}
    return set()
