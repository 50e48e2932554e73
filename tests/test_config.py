"""Configuration: the documented file is the embedded default, and loading is strict."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from csp_web.app.catalog import config_from_mapping, config_sections, load_config
from csp_web.config import Config, ConfigError
from specialists.tool.config import tool_section
from specialists.web.config import web_section

REPO = Path(__file__).resolve().parent.parent


def test_repository_config_yaml_equals_the_embedded_defaults() -> None:
    specs = config_sections()
    loaded = load_config(str(REPO / "config.yaml"), sections=specs)
    assert dataclasses.replace(loaded, sections=()) == Config()
    # The specialists' own sections: each documented, each at its defaults.
    assert dict(loaded.sections) == {spec.key: spec.cls() for spec in specs}


def test_no_path_and_no_env_gives_embedded_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CSP_WEB_CONFIG", raising=False)
    assert load_config() == Config()


def test_env_var_names_the_config_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("socket:\n  max_connections: 7\n")
    monkeypatch.setenv("CSP_WEB_CONFIG", str(path))
    assert load_config().socket.max_connections == 7


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"sockets": {}}, "sockets: unknown key"),
        ({"socket": {"max_conections": 3}}, "socket.max_conections: unknown key"),
        (
            {"tasks": {"specialists": {"web": {"max_runing": 1}}}},
            "tasks.specialists.web.max_runing: unknown key",
        ),
        ({"socket": {"max_connections": "many"}}, "socket.max_connections: expected int"),
        ({"socket": {"max_connections": 0}}, "socket.max_connections: must be positive"),
        ({"audit": {"enabled": 1}}, "audit.enabled: expected bool"),
        ({"daemon": {"log_level": "loud"}}, "daemon.log_level: expected one of"),
        ({"socket": {"allowed_uids": 5}}, "socket.allowed_uids: expected a list"),
        ({"socket": []}, "socket: expected a mapping"),
    ],
)
def test_bad_config_is_an_error_naming_its_path(data: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_mapping(data)
    assert str(info.value).startswith(message)


def test_uid_zero_may_be_allowed_explicitly() -> None:
    assert config_from_mapping({"socket": {"allowed_uids": [0, 1000]}}).socket.allowed_uids == (
        0,
        1000,
    )


def test_check_config_cli_reports_bad_key_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("memory:\n  socket_pth: /x\n")
    done = subprocess.run(
        [sys.executable, "-m", "csp_web", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert done.returncode == 2
    assert "memory.socket_pth: unknown key" in done.stderr
    assert done.stdout == ""


def test_check_config_cli_accepts_the_repository_file() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "csp_web", "check-config", str(REPO / "config.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_zero_means_off_only_where_a_setting_allows_it() -> None:
    config = config_from_mapping(
        {"web": {"search": {"prefetch_top": 0}, "guard": {"max_redirects": 0}}}
    )
    assert (web_section(config).search.prefetch_top, web_section(config).guard.max_redirects) == (
        0,
        0,
    )
    with pytest.raises(ConfigError, match=r"^web\.search\.max_results: must be positive"):
        config_from_mapping({"web": {"search": {"max_results": 0}}})


def test_mcp_servers_load_strictly_with_their_path() -> None:
    config = config_from_mapping(
        {"tool": {"mcp": {"servers": {"fs": {"command": "mcp-fs", "args": ["--root", "/w"]}}}}}
    )
    assert tool_section(config).mcp.servers["fs"].command == "mcp-fs"  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match=r"^tool\.mcp\.servers\.fs"):
        config_from_mapping({"tool": {"mcp": {"servers": {"fs": {"comand": "x"}}}}})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # A NaN grace period crashed the daemon at shutdown (trio: deadline must not be NaN);
        # an infinite one would wait forever for work in flight.
        ("daemon: {grace_period_s: .nan}", "daemon.grace_period_s: must be a finite number"),
        ("daemon: {grace_period_s: .inf}", "daemon.grace_period_s: must be a finite number"),
        ("web: {guard: {dns_timeout_s: .inf}}", "web.guard.dns_timeout_s: must be a finite"),
        ("web: {guard: {allow_private: [.nan]}}", "allow_private"),
        (f"connection: {{max_line_bytes: {2**63}}}", "max_line_bytes: must be at most"),
    ],
)
def test_a_number_that_is_not_finite_or_not_an_int64_is_refused(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=message):
        load_config(str(path))


def test_the_largest_int64_is_accepted_where_a_number_may_be_large(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"connection: {{max_line_bytes: {2**63 - 1}}}\n")
    assert load_config(str(path)).connection.max_line_bytes == 2**63 - 1


@pytest.mark.parametrize(
    "text",
    [
        "daemon: {grace_period_s: 1}\ndaemon: {grace_period_s: 2}\n",
        "tool:\n  exec: {allow_shell: false}\n  exec: {workspace_roots: [/srv/w]}\n",
        "web: {apis: {x: {base_url: 'https://a/'}, x: {base_url: 'https://b/'}}}\n",
    ],
)
def test_a_key_given_twice_in_one_mapping_is_refused_naming_it(tmp_path: Path, text: str) -> None:
    # PyYAML keeps the last silently: the first exec block's settings would vanish unseen.
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="found duplicate key"):
        load_config(str(path))


@pytest.mark.parametrize("nesting", ["[" * 5000 + "]" * 5000, "{a: " * 5000 + "1" + "}" * 5000])
def test_yaml_nested_past_the_stack_is_a_config_error_not_a_recursion_error(
    tmp_path: Path, nesting: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"daemon: {nesting}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    assert str(caught.value) == f"{path}: not valid YAML: nested too deeply"


def test_a_yaml_merge_key_still_lets_a_mapping_override_what_it_merges(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "tasks:\n  specialists:\n    web: &pool {max_running: 2, max_queued: 3}\n"
        "    tool: {<<: *pool, max_running: 4}\n"
    )
    tool = load_config(str(path)).tasks.specialists.tool
    assert (tool.max_running, tool.max_queued) == (4, 3)
