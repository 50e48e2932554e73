"""The documented policy (docs/exec-policy.md) runs the tool seed's ``npm test`` (issue 9.9),
``node``, ``python3 -m pytest`` and ``git``, with Debian's real programs, in a small project.

The policy is read from the document itself, so the document cannot drift from what works.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import trio
import yaml

from csp_web.app.catalog import config_from_mapping
from csp_web.core.api.errors import OpError
from protocol import ErrorCode
from specialists.tool.config import tool_section
from specialists.tool.exec import ExecRequest, ExecResult, run_command
from specialists.tool.exec.config import ExecConfig

from .exec_support import IS_ROOT, NOBODY, probe, scratch_dir

_DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "exec-policy.md")
_PROGRAMS = ("node", "npm", "git", "python3")


def documented_policy(workspace: str) -> ExecConfig:
    with open(_DOC) as f:
        (block,) = re.findall(r"```yaml\n(.*?)```", f.read(), re.DOTALL)
    data: dict[str, Any] = yaml.safe_load(block)
    data["tool"]["exec"]["workspace_roots"] = [workspace]
    return tool_section(config_from_mapping(data)).exec


@pytest.fixture
def project() -> Iterator[str]:
    missing = [p for p in _PROGRAMS if shutil.which(p, path="/usr/bin") is None]
    if missing:
        pytest.fail(f"{missing} required: scripts/install-system-deps installs them")
    with scratch_dir() as workspace:
        files = {
            "package.json": json.dumps(
                {"name": "demo", "version": "1.0.0", "scripts": {"test": "node test.js"}}
            ),
            "sum.js": "module.exports = (a, b) => a + b;\n",
            "test.js": (
                "const assert = require('node:assert');\n"
                "const sum = require('./sum');\n"
                "assert.strictEqual(sum(2, 3), 5);\n"
                "console.log('1 test passed');\n"
            ),
            "test_sum.py": "def test_sum():\n    assert 2 + 3 == 5\n",
        }
        for name, text in files.items():
            path = os.path.join(workspace, name)
            with open(path, "w") as f:
                f.write(text)
            if IS_ROOT:
                os.chown(path, NOBODY, NOBODY)
        yield workspace


async def run(config: ExecConfig, command: str, **fields: Any) -> ExecResult:
    sandbox = await probe(config, "bwrap")
    if sandbox.cgroup is None:
        pytest.fail(f"the policy needs a cgroup: {sandbox.cgroup_reason}")
    with trio.fail_after(120):
        request = ExecRequest(command, timeout_ms=60_000, **fields)
        return await run_command(request, config, sandbox=sandbox)


async def test_npm_test_passes_under_the_documented_policy(project: str) -> None:
    config = documented_policy(project)
    result = await run(config, "npm test", env={"npm_config_update_notifier": "false"})
    assert result.exit_code == 0, result.stderr
    assert "1 test passed" in result.stdout
    assert result.limits_by in ("cgroup1", "cgroup2")
    assert not result.limits


async def test_npm_test_cannot_run_under_the_default_policy(project: str) -> None:
    default = replace(ExecConfig(), workspace_roots=(project,))
    with pytest.raises(OpError) as caught:
        await run(default, "npm test")
    assert (caught.value.code, caught.value.detail) == (ErrorCode.COMMAND_BLOCKED, "npm")


async def test_node_runs_under_the_documented_policy(project: str) -> None:
    result = await run(
        documented_policy(project), "node -e 'console.log(require(\"./sum\")(4, 5))'"
    )
    assert (result.exit_code, result.stdout) == (0, "9\n"), result.stderr


async def test_python_pytest_runs_under_the_documented_policy(project: str) -> None:
    result = await run(documented_policy(project), "python3 -m pytest -q -p no:cacheprovider")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


async def test_git_runs_under_the_documented_policy(project: str) -> None:
    config = documented_policy(project)
    for command in (
        "git init -q",
        "git -c user.name=a -c user.email=a@example.org add package.json",
        "git -c user.name=a -c user.email=a@example.org commit -q -m first",
    ):
        step = await run(config, command)
        assert step.exit_code == 0, (command, step.stderr)
    log = await run(config, "git log --format=%s")
    assert (log.exit_code, log.stdout) == (0, "first\n"), log.stderr


async def test_the_policy_bounds_node_by_the_commands_memory(project: str) -> None:
    config = replace(documented_policy(project), max_memory_bytes=128 * 1024 * 1024)
    grow = "node -e 'const a = []; for (;;) a.push(Buffer.alloc(1 << 20, 1))'"
    result = await run(config, grow)
    assert result.exit_code != 0
    assert "memory" in result.limits
