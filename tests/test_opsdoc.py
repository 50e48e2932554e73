"""docs/ops.md is generated from the registry and must match it."""

from __future__ import annotations

from pathlib import Path

from csp_web.app import opsdoc
from csp_web.app.catalog import SPECIALISTS
from csp_web.core.daemon.compose import op_table

DOC = Path(__file__).resolve().parent.parent / "docs" / "ops.md"


def test_ops_reference_is_up_to_date() -> None:
    """D-1: regenerate with `python -m csp_web.app.opsdoc > docs/ops.md`."""
    assert DOC.read_text("utf-8") == opsdoc.render(op_table(SPECIALISTS))


def test_every_op_is_in_the_reference() -> None:
    text = DOC.read_text("utf-8")
    for op in op_table(SPECIALISTS):
        assert f"## `{op.req}` IN:{op.domain} OUT:{op.out}" in text
