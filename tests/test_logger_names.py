"""Every logger is named after its module (``logging.getLogger(__name__)``), and the daemon's
log setup (csp_web/core/api/logs.py, configured on the root logger) sends the records of every
package, ``specialists.*`` and ``protocol`` included, to stderr at the configured level.

A hand-written name drifts when a module moves (issue 23: 27 of 43 no longer matched, 20 named
packages that were gone), and a filter or a ``caplog`` set on the module's name then misses it.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("protocol", "csp_web", "specialists")
PROCESS_TIMEOUT_S = 60

# Modules whose own logger the subprocess logs through, one per package family.
LOGGING_MODULES = (
    "specialists.node.hub",
    "specialists.tool.mcp.session",
    "specialists.web.research.run",
    "csp_web.core.dispatch.dispatcher",
    "csp_web.memory.outbox_room",
)
LEVELS = ("debug", "info", "warning")
# Each level in turn: set up the logs as the CLI does, then log at every level through each
# module's own logger; the message names the configured level.
_EMIT = """
import importlib, logging, sys
from csp_web.core.api.logs import setup_logging
loggers = [logging.getLogger("protocol")]
for name in sys.argv[1:]:
    module = importlib.import_module(name)
    loggers.append(getattr(module, "log", None) or getattr(module, "logger"))
for configured in ("debug", "info", "warning"):
    setup_logging(configured, as_json=True)
    for log in loggers:
        log.debug(configured)
        log.info(configured)
        log.warning(configured)
"""


def _getlogger_calls(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text("utf-8"), str(path))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute | ast.Name)
        and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
        == "getLogger"
    ]


def _is_module_name(call: ast.Call) -> bool:
    match call.args:
        case [ast.Name(id="__name__")]:
            return True
        case []:  # the root logger: only the log setup touches it
            return True
    return False


def test_every_logger_in_the_packages_is_named_after_its_module() -> None:
    calls = {
        f"{path.relative_to(ROOT)}:{call.lineno}": _is_module_name(call)
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for call in _getlogger_calls(path)
    }
    assert len(calls) > 40  # the scan sees the loggers
    assert [where for where, ok in calls.items() if not ok] == []


@pytest.mark.slow
def test_each_package_logs_to_stderr_under_its_module_name_at_the_configured_level() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _EMIT, *LOGGING_MODULES],
        cwd=ROOT,
        capture_output=True,
        timeout=PROCESS_TIMEOUT_S,
        check=True,
    )
    assert done.stdout == b""  # stdout is the wire
    seen: dict[tuple[str, str], list[str]] = {}
    for line in done.stderr.decode().splitlines():
        entry = json.loads(line)
        seen.setdefault((entry["logger"], entry["msg"]), []).append(entry["level"])
    expected = {
        (name, configured): list(LEVELS[LEVELS.index(configured) :])
        for name in ("protocol", *LOGGING_MODULES)
        for configured in LEVELS
    }
    assert {key: seen.get(key, []) for key in expected} == expected
