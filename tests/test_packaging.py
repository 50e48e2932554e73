"""The installation csp-web runs from: its own top-level ``protocol`` and ``specialists``
(another package's of the same name stops it with one line, exit 2), and its optional parts
(extras) missing: the daemon starts, the ops that need one answer not_available:<extra>."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CSP_WEB = Path(sys.executable).parent / "csp-web"
# Runs the csp-web command with the named top-level modules made unimportable (as in an
# environment installed without their extras): a finder first on sys.meta_path refuses them.
_BLOCKED_RUN = textwrap.dedent(
    """
    import importlib.abc, sys
    blocked = set(sys.argv[1].split(","))
    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in blocked:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, Blocker())
    from csp_web.app.start import main
    code = main(sys.argv[2:])
    loaded = sorted(m for m in sys.modules if m.partition(".")[0] in blocked)
    print("loaded:", loaded, file=sys.stderr)
    sys.exit(code)
    """
)


def _run(argv: list[str], env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    # Not from the checkout: ``python -m``/``-c`` put the working directory first on sys.path.
    cwd = env["XDG_STATE_HOME"]
    os.makedirs(cwd, exist_ok=True)
    return subprocess.run(
        argv, input=stdin, capture_output=True, text=True, env=env, timeout=60, check=False, cwd=cwd
    )


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CSP_WEB")}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    return env | extra


def _fake_package(where: Path, name: str, *, dist: str | None = None) -> Path:
    package = where / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("print('foreign code ran')\n")
    if dist is not None:  # a distribution that ships it, as pip would leave it
        info = where / f"{dist}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        (info / "top_level.txt").write_text(f"{name}\n")
        (info / "RECORD").write_text(f"{name}/__init__.py,,\n")
    return package


@pytest.mark.parametrize("name", ["protocol", "specialists"])
def test_a_foreign_package_first_on_sys_path_stops_csp_web_with_one_line(
    tmp_path: Path, name: str
) -> None:
    package = _fake_package(tmp_path / "elsewhere", name)
    env = _env(tmp_path, PYTHONPATH=str(package.parent))
    done = _run([str(CSP_WEB), "serve"], env, "TASK REQ:ping IN:SYS OUT:PONG\n\n")
    assert done.returncode == 2
    assert done.stdout == ""  # the foreign package's code never ran: found, not imported
    (line,) = done.stderr.splitlines()
    assert f"'{name}' is {package / '__init__.py'}, not csp-web's (in {ROOT})" in line
    assert "remove its folder from PYTHONPATH" in line


def test_a_foreign_distribution_shadowing_csp_web_is_named_with_its_fix(tmp_path: Path) -> None:
    package = _fake_package(tmp_path / "site", "protocol", dist="protocol")
    env = _env(tmp_path, PYTHONPATH=str(package.parent))
    done = _run([str(CSP_WEB), "--version"], env)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("csp-web: package 'protocol' is ")
    assert "shadowed by protocol: uninstall it (pip uninstall protocol)" in line
    assert "pip install --force-reinstall csp-web" in line


def test_a_package_installed_over_csp_webs_is_told_by_its_missing_marker(tmp_path: Path) -> None:
    """Another distribution's files written over csp-web's own folder (same place, no
    ``__csp_web__``): csp_web and specialists beside it are ours, protocol is not."""
    site = tmp_path / "site"
    site.mkdir()
    for own in ("csp_web", "specialists"):
        (site / own).symlink_to(ROOT / own)
    _fake_package(site, "protocol", dist="protocol")
    env = _env(tmp_path, PYTHONPATH=str(site))
    done = _run([sys.executable, "-m", "csp_web", "--version"], env)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert f"'protocol' at {site / 'protocol' / '__init__.py'} is another package's" in line
    assert "pip uninstall protocol" in line


def test_csp_webs_own_packages_pass_the_check(tmp_path: Path) -> None:
    done = _run([str(CSP_WEB), "--version"], _env(tmp_path))
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("csp-web ")


def _without(
    tmp_path: Path, blocked: str, argv: list[str], stdin: str = ""
) -> tuple[int, str, str]:
    env = _env(tmp_path)
    done = _run([sys.executable, "-c", _BLOCKED_RUN, blocked, *argv], env, stdin)
    return done.returncode, done.stdout, done.stderr


BROWSER_TASK = "TASK REQ:browser IN:TOOL OUT:BROWSER_RESULT\nID b\nACTION navigate\nTARGET_URL https://example.test/\n\n"
CANVAS_TASK = "TASK REQ:canvas IN:TOOL OUT:CANVAS_RESULT\nID c\nACTION present\nNODE main\nURL https://example.test/\n\n"
PING_TASK = "TASK REQ:ping IN:SYS OUT:PONG\nID p\n\n"


@pytest.mark.slow  # starts the daemon in a subprocess, with every specialist
def test_without_the_browser_extra_the_daemon_serves_and_browser_ops_say_what_to_install(
    tmp_path: Path,
) -> None:
    code, stdout, stderr = _without(
        tmp_path, "playwright", ["serve"], PING_TASK + BROWSER_TASK + CANVAS_TASK
    )
    assert code == 0, stderr
    # Replies come as tasks end (SPEC C-2): the two refusals in either order.
    replies = sorted(stdout.removesuffix("\n\n").split("\n\n"))
    assert replies == [
        "STATUS FAIL\nID b\nSCOPE [browser]\nDATA none\n"
        "ERROR not_available:browser (install csp-web[browser])",
        "STATUS FAIL\nID c\nSCOPE [canvas]\nDATA none\n"
        "ERROR not_available:browser (install csp-web[browser])",
        "STATUS OK\nID p\nSCOPE [sys]\nDATA pong",
    ]
    assert "loaded: []" in stderr


@pytest.mark.slow  # starts the daemon in a subprocess, with every specialist
def test_without_the_mcp_extra_mcp_calls_and_the_mcp_face_say_what_to_install(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("tool:\n  mcp:\n    servers:\n      toy: {command: /bin/true}\n")
    task = "TASK REQ:mcp IN:TOOL OUT:MCP_RESULT\nID m\nSERVER toy\nTOOL add\n\n"
    code, stdout, stderr = _without(tmp_path, "mcp", ["serve", "--config", str(config)], task)
    assert code == 0, stderr
    assert stdout == (
        "STATUS FAIL\nID m\nSCOPE [mcp]\nDATA none\n"
        "ERROR not_available:mcp (install csp-web[mcp])\n\n"
    )
    assert "tool.mcp names servers but mcp (install csp-web[mcp])" in stderr
    code, stdout, stderr = _without(tmp_path, "mcp", ["mcp"])
    assert (code, stdout) == (2, "")
    assert stderr.splitlines()[0] == "csp-web: mcp: not_available:mcp (install csp-web[mcp])"


@pytest.mark.slow  # starts the daemon in a subprocess, with every specialist
def test_without_the_redis_extra_a_configured_fleet_member_refuses_to_start(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("redis:\n  url: redis://127.0.0.1:1/0\n")
    code, stdout, stderr = _without(tmp_path, "redis", ["serve", "--config", str(config)])
    assert (code, stdout) == (2, "")
    assert stderr.splitlines()[0] == "csp-web: redis.url is set: redis (install csp-web[redis])"
    config.write_text("redis:\n  sentinel: {master: m, sentinels: ['127.0.0.1:1']}\n")
    code, stdout, stderr = _without(tmp_path, "redis", ["serve", "--config", str(config)])
    assert (code, stdout) == (2, "")
    assert stderr.splitlines()[0] == (
        "csp-web: redis.sentinel is set: redis (install csp-web[redis])"
    )
    code, stdout, stderr = _without(tmp_path, "redis", ["serve"], PING_TASK)
    assert (code, stdout) == (0, "STATUS OK\nID p\nSCOPE [sys]\nDATA pong\n\n")


def test_every_extra_named_in_the_code_is_declared_and_all_holds_them() -> None:
    import tomllib

    from csp_web.core.api.extras import MODULES

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = extras["optional-dependencies"]
    assert set(MODULES) <= set(declared)
    assert declared["all"] == ["csp-web[browser,redis,mcp,otel]"]
    assert "csp-web[all]" in declared["test"]
    for extra, module in MODULES.items():
        assert any(dep.startswith(module) for dep in declared[extra])
        assert not any(dep.startswith(module) for dep in extras["dependencies"])
