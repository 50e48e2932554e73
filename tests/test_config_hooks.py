"""The hooks through which a specialist's own section tells the core what it must know, and
the shared pieces (guard, cache, cron) the core finds by class: csp_web/config names no
specialist (issue 23 §3), yet sees the web's guard, the tool's workspaces and credentials."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from csp_web.app.catalog import config_from_mapping, config_sections
from csp_web.config import (
    CacheConfig,
    Config,
    ConfigError,
    GuardConfig,
    secret_variables,
    shared_section,
    with_shared,
    workspace_roots,
)
from csp_web.config.load import complete_sections
from csp_web.cron import CronConfig, cron_section
from specialists.web.config import web_section


def test_shared_pieces_are_found_by_class_in_the_section_that_holds_them() -> None:
    config = config_from_mapping(
        {"web": {"guard": {"max_redirects": 0}}, "tool": {"cron": {"max_jobs": 3}}}
    )
    assert shared_section(config, GuardConfig) == GuardConfig(max_redirects=0)
    assert cron_section(config) == CronConfig(max_jobs=3)
    assert shared_section(Config(), CacheConfig) == CacheConfig()  # absent: the defaults


def test_with_shared_changes_a_piece_where_its_section_holds_it() -> None:
    config = config_from_mapping({"web": {"guard": {"allow_http": True}}})
    opened = with_shared(
        config, GuardConfig, lambda guard: dataclasses.replace(guard, allowed_ports=(8080,))
    )
    assert web_section(opened).guard == GuardConfig(allow_http=True, allowed_ports=(8080,))
    assert dataclasses.replace(
        web_section(opened), guard=GuardConfig(allow_http=True)
    ) == web_section(config)


def test_the_daemon_completes_the_sections_a_file_leaves_out_so_shared_pieces_can_change() -> None:
    """Without ``web:`` in the file there is no section to hold the guard: replay's change
    would be lost, so the daemon's loading adds every section at its defaults."""
    bare = config_from_mapping({})
    with pytest.raises(LookupError, match="no config section holds a GuardConfig"):
        with_shared(bare, GuardConfig, lambda _: GuardConfig(allow_http=True))
    assert with_shared(bare, GuardConfig, lambda guard: guard) == bare  # nothing lost
    complete = complete_sections(bare, config_sections())
    assert [key for key, _ in complete.sections] == [spec.key for spec in config_sections()]
    opened = with_shared(complete, GuardConfig, lambda _: GuardConfig(allow_http=True))
    assert shared_section(opened, GuardConfig).allow_http is True


def test_credentials_are_named_by_the_sections_that_read_them() -> None:
    config = config_from_mapping(
        {"web": {"summarize": {"llm_api_key_env": "SUMMARY_KEY"}}, "redis": {"password_env": "RP"}}
    )
    names = secret_variables(config)
    assert {"SUMMARY_KEY", "RP", "BRAVE_API_KEY", "GITHUB_TOKEN", "FIRECRAWL_API_KEY"} <= set(names)
    assert list(names) == sorted(names)


def test_workspace_roots_come_from_the_section_that_opens_them(tmp_path: Path) -> None:
    root = str(tmp_path / "ws")
    config = config_from_mapping({"tool": {"exec": {"workspace_roots": [root]}}})
    assert workspace_roots(config) == (root,)
    assert workspace_roots(Config()) == ()


def test_a_sections_check_of_the_whole_runs_at_load_with_its_message(tmp_path: Path) -> None:
    state = tmp_path / "state"
    data = {
        "daemon": {"state_dir": str(state)},
        "tool": {"exec": {"workspace_roots": [str(state)]}},
    }
    with pytest.raises(
        ConfigError, match=r"^tool\.exec\.workspace_roots: .* overlaps the daemon's own"
    ):
        config_from_mapping(data)
