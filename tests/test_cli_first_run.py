"""The README's first-run commands: CI runs the second one as written, and the suite passes
in a clone that has no ``../shared`` beside it (tests that need it skip, saying why)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text("utf-8")
    block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    return block.splitlines()


def test_readme_opens_with_two_commands_that_use_the_project_venv() -> None:
    first, second = readme_commands()
    # Every extra (issue 28): the first run has the browser, Redis and MCP parts too.
    assert first.startswith("scripts/venv && .venv/bin/pip install -q -e '.[all]' && ")
    assert ".venv/bin/pip install -q -e '.[test]' && " in second  # [test] pulls [all]
    assert first.endswith("| .venv/bin/csp-web serve")
    assert "python3 -m pip" not in first + second  # PEP 668 refuses it on Debian's python3


def test_ci_runs_exactly_the_readmes_second_command() -> None:
    lines = (REPO / ".ci" / "run").read_text("utf-8").splitlines()
    assert lines[-1] == readme_commands()[1]


def test_scripts_venv_refuses_a_python_older_than_3_11(tmp_path: Path) -> None:
    old = tmp_path / "python-old"
    old.write_text('#!/bin/sh\ncase "$*" in *version_info*) exit 1;; *) echo Python 3.9.2;; esac\n')
    old.chmod(0o755)
    clone = tmp_path / "clone"
    (clone / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "venv", clone / "scripts" / "venv")
    done = subprocess.run(
        [str(clone / "scripts" / "venv")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHON": str(old)},
    )
    assert (done.returncode, done.stderr) == (
        2,
        f"scripts/venv: csp-web needs Python >= 3.11; {old} is Python 3.9.2\n",
    )
    assert not (clone / ".venv").exists()


def test_a_test_that_reads_shared_skips_with_its_reason_when_shared_is_absent(
    tmp_path: Path,
) -> None:
    clone = tmp_path / "clone"  # tmp_path/shared does not exist
    for part in ("protocol", "csp_web", "specialists", "tests", "bench"):
        shutil.copytree(REPO / part, clone / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", clone / "pyproject.toml")
    test = "tests/web/test_extract.py::test_dev_corpus_f1_stays_above_the_regression_guard"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", test],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=clone,
        env={**os.environ, "PYTHONPATH": str(clone)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout
    assert f"the evaluation corpus {tmp_path}/shared/corpus/extraction-dev" in done.stdout
