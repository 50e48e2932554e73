"""Every op's typed audit adds fields of its own: none shadows a common audit field."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from csp_web.core.api.audit import OpAudit

COMMON = {"time", "op", "domain", "uid", "pid", "connection", "id", "outcome", "error"}
COMMON |= {"duration_ms"}
MODULES = [
    "specialists.web.services",
    "specialists.tool.ops_exec",
    "specialists.tool.ops_mcp",
    "specialists.browser.ops_browser",
    "specialists.browser.ops_canvas",
    "specialists.node.ops_node",
]


def _audits() -> list[type[OpAudit]]:
    for module in MODULES:
        importlib.import_module(module)
    return list(OpAudit.__subclasses__())


@pytest.mark.parametrize("audit", _audits(), ids=lambda audit: audit.__name__)
def test_an_ops_audit_is_frozen_and_shadows_no_common_field(audit: type[OpAudit]) -> None:
    names = {field.name for field in dataclasses.fields(audit)}
    assert names
    assert not names & COMMON
    assert audit.__dataclass_params__.frozen  # type: ignore[attr-defined]
