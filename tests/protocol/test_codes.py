"""The one catalogue of error codes (protocol/codes.py) and what SPEC.md says of it."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest

from protocol import DIMENSIONS, ErrorCode
from protocol.codes import main

from .samples import SAMPLES

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "protocol" / "SPEC.md"
# ErrorCode's __new__ takes (value, meaning), so mypy rejects the enum's own value lookup.
by_value = cast(Callable[[str], ErrorCode], ErrorCode)
SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")


def spec_section(title: str) -> str:
    """The text of the SPEC.md section whose heading contains ``title``."""
    text = SPEC.read_text(encoding="utf-8")
    [section] = [
        part for part in re.split(r"^## ", text, flags=re.M) if title in part.split("\n")[0]
    ]
    return section


def test_codes_are_unique() -> None:
    values = [code.value for code in ErrorCode]
    assert len(values) == len(set(values))
    assert len(ErrorCode.__members__) == len(values)


@pytest.mark.parametrize("code", list(ErrorCode), ids=str)
def test_code_is_lowercase_snake_case_named_after_its_member(code: ErrorCode) -> None:
    assert SNAKE.fullmatch(code.value)
    assert code.name == code.value.upper()
    assert str(code) == code.value
    assert f"{code}:detail" == f"{code.value}:detail"


@pytest.mark.parametrize("code", list(ErrorCode), ids=str)
def test_code_has_a_one_line_meaning(code: ErrorCode) -> None:
    assert isinstance(code.meaning, str)
    assert code.meaning.strip() == code.meaning
    assert code.meaning
    assert "\n" not in code.meaning


def test_codes_are_looked_up_by_their_wire_spelling() -> None:
    assert by_value("bad_frame") is ErrorCode.BAD_FRAME
    with pytest.raises(ValueError, match="no_such_code"):
        by_value("no_such_code")


def test_spec_error_section_names_the_catalogue_module() -> None:
    assert "protocol/codes.py" in spec_section("Error catalogue")


def test_every_code_the_spec_names_is_in_the_catalogue() -> None:
    """R-5: the protocol codes, and every other code SPEC.md spells in backticks."""
    text = SPEC.read_text(encoding="utf-8")
    named = set(re.findall(r"`(?:FAIL |ERROR )?([a-z]+(?:_[a-z]+)+)(?::[^`]*)?`", text))
    named |= {"bad_frame", "bad_header", "bad_encoding", "bad_value", "frame_too_large", "busy"}
    records = {"web_op", "browser_op", "canvas_op", "exec_log", "research_job", "cron_run"}
    ops_keys = {"frame_fields", "read_only", "open_world"}  # REQ:ops JSON keys (D-5)
    dimensions = set(DIMENSIONS)  # BUDGET's (D-3)
    not_codes = {*records, *ops_keys, *dimensions, "cron_due", "max_incomplete_event_size"}
    assert sorted(named - not_codes - {code.value for code in ErrorCode}) == []


def test_every_error_line_in_the_seeds_uses_a_catalogue_code() -> None:
    errors = [value for s in SAMPLES for key, value in s.frame.fields if key == "ERROR"]
    assert errors
    for value in errors:
        code, colon, _ = value.partition(":")
        assert colon
        assert by_value(code).value == code


def test_main_prints_each_code_with_its_meaning(capsys: pytest.CaptureFixture[str]) -> None:
    main()
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [code.value for code in ErrorCode]
    for line, code in zip(lines, ErrorCode, strict=True):
        assert line.endswith("  " + code.meaning)


def test_python_m_protocol_codes_prints_the_catalogue_without_a_warning() -> None:
    """SPEC.md section 5 promises `python -m protocol.codes`; run with warnings as errors, as
    the package once imported ``codes`` before runpy ran it (a RuntimeWarning)."""
    done = subprocess.run(
        [sys.executable, "-W", "error", "-m", "protocol.codes"],
        capture_output=True,
        check=True,
        cwd=REPO,
        text=True,
        timeout=60,
    )
    assert [line.split()[0] for line in done.stdout.splitlines()] == [c.value for c in ErrorCode]
    assert done.stderr == ""
