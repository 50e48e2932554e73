"""scripts/bench's table: figure lines parsed from a bench's output, goals judged, a failed
bench shown as its own row (bench/table.py; no bench is run here)."""

from __future__ import annotations

from pathlib import Path

from bench.suite import run_bench
from bench.table import COLUMNS, Row, failed, parse, render, verdict

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


def test_a_goal_or_figure_that_cannot_be_read_is_never_met() -> None:
    assert verdict("n/a", "n/a", "<= 2x") == "?"
    assert verdict("0.1 ms", "", "fast") == "?"
    assert verdict("", "", "") == ""  # no goal: a figure for context, judged neither way


def test_a_failed_bench_is_one_error_row_beside_the_others() -> None:
    rows = [*parse("fetch", FETCH_OUTPUT, "1.2→1.8"), failed("workers", "missing", "1.8→1.8")]
    table = render(rows).splitlines()
    assert table[0].split() == [word for column in COLUMNS for word in column.split()]
    assert set(table[1]) == {"-", " "}
    assert len(table) == 2 + len(rows)
    assert table[-1].split() == ["workers", "(bench", "failed)", "missing", "error", "1.8→1.8"]


def test_the_suite_shows_a_missing_bench_as_an_error_row(tmp_path: Path) -> None:
    rows = run_bench("no_such_bench", quick=True, log_dir=tmp_path)
    assert [(row.met, row.value) for row in rows] == [("error", "missing: bench/no_such_bench.py")]
