"""Every rule in protocol/NODES.md is named by at least one test (as test_spec_coverage.py
does for SPEC.md)."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
NODES = TESTS.parent / "protocol" / "NODES.md"
RULE_ID = re.compile(r"\*\*(N-\d+)\*\*")


def test_every_nodes_rule_is_named_by_a_test() -> None:
    ids = RULE_ID.findall(NODES.read_text(encoding="utf-8"))
    assert ids == [f"N-{n}" for n in range(1, len(ids) + 1)]
    me = Path(__file__).resolve()
    text = "\n".join(p.read_text(encoding="utf-8") for p in TESTS.rglob("*.py") if p != me)
    missing = [i for i in ids if not re.search(rf"\b{re.escape(i)}\b", text)]
    assert missing == [], f"rules in protocol/NODES.md that no test names: {', '.join(missing)}"
