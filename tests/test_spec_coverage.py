"""Every rule in protocol/SPEC.md is named by at least one test.

A test names the rule ids it checks, by convention in its docstring
(``\"\"\"F-3: inline text may contain IN:.\"\"\"``); this test collects every bold ``**X-N**`` id
from SPEC.md, looks for each as a whole word in every ``tests/**/*.py`` but this file, and fails
listing the ids that no test names.
"""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SPEC = TESTS.parent / "protocol" / "SPEC.md"
RULE_ID = re.compile(r"\*\*([A-Z]+-\d+)\*\*")


def spec_rule_ids() -> list[str]:
    """The rule ids SPEC.md defines, in order of appearance."""
    return RULE_ID.findall(SPEC.read_text(encoding="utf-8"))


def source_of_tests() -> str:
    """Every test module's source but this one's, concatenated."""
    me = Path(__file__).resolve()
    sources = sorted(p for p in TESTS.rglob("*.py") if p.resolve() != me)
    return "\n".join(path.read_text(encoding="utf-8") for path in sources)


def test_spec_rule_ids_are_unique_and_found() -> None:
    ids = spec_rule_ids()
    assert ids, f"no **X-N** rule ids found in {SPEC}"
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


def test_every_spec_rule_is_named_by_a_test() -> None:
    text = source_of_tests()
    missing = [i for i in spec_rule_ids() if not re.search(rf"\b{re.escape(i)}\b", text)]
    assert missing == [], f"rules in protocol/SPEC.md that no test names: {', '.join(missing)}"
