"""scripts/bench's table: figure lines parsed from a bench's output, goals judged, a failed
bench shown as its own row (bench/table.py, bench/suite.py; the benches run here are
stand-ins of a line or two, never the real ones)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.suite import REPO_ROOT as REPO
from bench.suite import run_bench
from bench.table import COLUMNS, ERROR_CHARS, Row, failed, parse, render, verdict

FETCH_OUTPUT = """\
outbox synchronous=normal (every op writes its one audit record):
  (a) cached fetch round trip: p50 0.410 ms
cached fetch p50 round trip\t0.410 ms\t0.220 ms ping p50\t1.86x\t<= 2x
daemon CPU per cache hit\t0.35 ms\t0.05 ms per ping\t7.0\t<= 0.3 ms
throughput at 64 vs peak, cached\t480 fetches/s\t500 fetches/s at 16\t0.96\t>= 90%
daemon cores at 16 connections\t1,412.5 mcores\t2 cores\t0.71\t≥ 1300 mcores
a goal in words\t3 pages\t\t\tas low as it goes
a figure for context\t1/4/16 per s\t\t\t
reproduce: python bench/fetch.py --quick
"""


def test_figure_lines_become_rows_and_other_lines_are_ignored() -> None:
    rows = parse("fetch", FETCH_OUTPUT, "1.20→1.80")
    assert [row.measure for row in rows] == [
        "cached fetch p50 round trip",
        "daemon CPU per cache hit",
        "throughput at 64 vs peak, cached",
        "daemon cores at 16 connections",
        "a goal in words",
        "a figure for context",
    ]
    assert rows[0] == Row(
        "fetch",
        "cached fetch p50 round trip",
        "0.410 ms",
        "0.220 ms ping p50",
        "1.86x",
        "<= 2x",
        "yes",
        "1.20→1.80",
    )


def test_goals_in_x_or_percent_judge_the_ratio_and_others_the_value() -> None:
    met = [row.met for row in parse("fetch", FETCH_OUTPUT, "")]
    assert met == ["yes", "NO", "yes", "yes", "?", ""]


def test_goals_at_their_bound_are_met_and_just_past_it_are_not() -> None:
    assert verdict("2 ms", "1", "<= 2 ms") == "yes"
    assert verdict("2.01 ms", "1", "<= 2 ms") == "NO"
    assert verdict("x", "0.9", ">= 90%") == "yes"
    assert verdict("x", "0.89", ">= 90%") == "NO"
    assert verdict("x", "90%", ">= 90%") == "yes"
    assert verdict("30,000 frames/s", "", "> 30000 frames/s") == "NO"
    assert verdict("20,000 frames/s", "", ">= 30k frames/s") == "NO"
    assert verdict("1.2M frames/s", "", ">= 30k frames/s") == "yes"
    assert verdict("2 ms", "", "<= 3ms") == "yes"
    assert verdict("1.412", "0.71", ">= 1.3") == "yes"  # a bare bound: the value's own unit


def test_a_goal_or_figure_that_cannot_be_read_is_never_met() -> None:
    assert verdict("n/a", "n/a", "<= 2x") == "?"
    assert verdict("0.1 ms", "", "fast") == "?"
    assert verdict("", "", "") == ""  # no goal: a figure for context, judged neither way
    assert verdict("0.2", "0.1", "-") == ""


def test_a_failed_bench_is_one_error_row_beside_the_others() -> None:
    rows = [*parse("fetch", FETCH_OUTPUT, "1.2→1.8"), failed("workers", "missing", "1.8→1.8")]
    table = render(rows).splitlines()
    assert table[0].split() == [word for column in COLUMNS for word in column.split()]
    assert set(table[1]) == {"-", " "}
    assert len(table) == 2 + len(rows)
    assert table[-1].split() == ["workers", "missing", "error", "1.8→1.8"]


def test_a_long_error_is_cut_in_the_table() -> None:
    assert failed("daemon", "x" * 500, "1.0").measure == "x" * ERROR_CHARS


def test_the_suite_shows_a_missing_bench_as_an_error_row(tmp_path: Path) -> None:
    rows = run_bench(
        REPO / "bench" / "no_such_bench.py", quick=True, log_dir=tmp_path, timeout_s=60
    )
    assert [(row.met, row.measure) for row in rows] == [
        ("error", "missing: bench/no_such_bench.py")
    ]


def test_a_bench_that_fails_keeps_its_figures_and_adds_its_error(tmp_path: Path) -> None:
    """A real bench process: it prints one figure, then fails with --quick as its argument."""
    script = tmp_path / "flaky.py"
    script.write_text(
        "import sys\n"
        "print('ping p50\\t0.2 ms\\t0.1 ms\\t2.0x\\t<= 2x', flush=True)\n"
        "sys.exit(f'broke after {sys.argv[1]}')\n"
    )
    rows = run_bench(script, quick=True, log_dir=tmp_path, timeout_s=60)
    assert [(row.bench, row.measure, row.met) for row in rows] == [
        ("flaky", "ping p50", "yes"),
        ("flaky", "exit 1: broke after --quick", "error"),
    ]
    assert "broke after --quick" in (tmp_path / "flaky.log").read_text()


def test_a_bench_that_prints_no_figure_is_an_error_row(tmp_path: Path) -> None:
    script = tmp_path / "quiet.py"
    script.write_text("print('all fine, no figures')\n")
    rows = run_bench(script, quick=False, log_dir=tmp_path, timeout_s=60)
    assert [(row.measure, row.met) for row in rows] == [
        ("printed no figure line: all fine, no figures", "error")
    ]


@pytest.mark.slow  # the stand-in must get its child going before its time runs out
def test_a_bench_past_its_time_is_cut_off_with_what_it_started(tmp_path: Path) -> None:
    """The stand-in starts a child in a session of its own, as a bench starts its daemon."""
    script = tmp_path / "stuck.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "quiet = {'stdout': subprocess.DEVNULL, 'stderr': subprocess.DEVNULL}\n"
        "child = subprocess.Popen(['sleep', '60'], start_new_session=True, **quiet)\n"
        "print('child', child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    rows = run_bench(script, quick=True, log_dir=tmp_path, timeout_s=4)
    assert [(row.measure, row.met) for row in rows] == [("timed out after 4 s", "error")]
    child = int((tmp_path / "stuck.log").read_text().split("child ")[1].split()[0])
    # SIGKILL is sent, not yet taken: a loaded host shows the child running a moment more.
    until = time.monotonic() + 30
    while not ended(child) and time.monotonic() < until:
        time.sleep(0.05)
    assert ended(child)


def ended(pid: int) -> bool:
    """Whether ``pid`` is gone, or killed and waiting for its reaper (state Z)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"
