"""docs/ops.md is generated from the registry and must match it."""

from __future__ import annotations

from pathlib import Path

from csp_web.daemon import build_op_table
from specialists import opsdoc
from specialists.browser import browser_ops
from specialists.node import node_ops
from specialists.tool import tool_ops
from specialists.web import web_ops

DOC = Path(__file__).resolve().parent.parent / "docs" / "ops.md"


def test_ops_reference_is_up_to_date() -> None:
    """D-1: regenerate with `python -m specialists.opsdoc > docs/ops.md`."""
    assert DOC.read_text("utf-8") == opsdoc.render(
        build_op_table([*web_ops(), *tool_ops(), *browser_ops(), *node_ops()])
    )


def test_every_op_is_in_the_reference() -> None:
    text = DOC.read_text("utf-8")
    for op in build_op_table([*web_ops(), *tool_ops(), *browser_ops(), *node_ops()]):
        assert f"## `{op.req}` IN:{op.domain} OUT:{op.out}" in text
