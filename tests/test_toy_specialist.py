"""docs/adding-an-op.md's promise: a specialist is its folder and one line in the catalogue.
The toy specialist (tests/toy: its config section, an op, a private path) is registered with
that one line, and then loaded from config.yaml, hides its private path, and is dispatched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from csp_web.app.catalog import SPECIALISTS, config_from_mapping, config_sections, load_config
from csp_web.config import Config, ConfigError, SectionSpec, daemon_paths, section_of
from csp_web.config.reload import plan_reload
from csp_web.core.api.context import Peer
from csp_web.core.daemon.compose import op_table, open_daemon, reload_paths
from csp_web.core.daemon.lifecycle import reload_settings
from protocol import Status, Task
from specialists.tool.config import tool_section
from tests.toy import TOY
from tests.toy.config import ToyConfig

CATALOGUE = (*SPECIALISTS, TOY)  # the one line


def _load(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "config.yaml"
    path.write_text(f"daemon:\n  state_dir: {tmp_path / 'state'}\n{text}", encoding="utf-8")
    return load_config(str(path), sections=config_sections(CATALOGUE))


def test_a_registered_specialists_section_is_loaded_from_its_own_key(tmp_path: Path) -> None:
    config = _load(tmp_path, f"toy:\n  greeting: ahoy\n  key_path: {tmp_path}/keys/toy.key\n")
    assert section_of(config, "toy", ToyConfig) == ToyConfig("ahoy", f"{tmp_path}/keys/toy.key")
    assert ("greet", "TOY") in {(spec.req, spec.domain) for spec in op_table(CATALOGUE)}


def test_a_specialists_absent_section_is_its_defaults(tmp_path: Path) -> None:
    assert section_of(_load(tmp_path, ""), "toy", ToyConfig) == ToyConfig()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("toy:\n  greting: hi\n", "toy.greting: unknown key"),
        ("toy:\n  greeting: ''\n", "toy.greeting: must not be empty"),
        ("toy:\n  greeting: 3\n", "toy.greeting: expected str"),
        ("toyy:\n  greeting: hi\n", "toyy: unknown key"),
    ],
)
def test_a_specialists_section_is_loaded_as_strictly_as_the_core(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        _load(tmp_path, text)
    assert str(raised.value) == message


def test_without_registration_the_section_is_an_unknown_key(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("toy:\n  greeting: hi\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^toy: unknown key$"):
        load_config(str(path), sections=config_sections(SPECIALISTS))


def test_a_specialists_private_paths_are_the_daemons_own(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    config = _load(tmp_path, f"toy:\n  key_path: {keys}/toy.key\n")
    paths = daemon_paths(config)
    assert f"{keys}/toy.key" in paths
    assert os.path.join(str(tmp_path / "state"), "toy") in paths
    workspace = f"tool:\n  exec:\n    workspace_roots: [{keys}]\n"
    with pytest.raises(ConfigError, match="overlaps the daemon's own"):
        _load(tmp_path, f"{workspace}toy:\n  key_path: {keys}/toy.key\n")


async def test_a_registered_specialists_op_is_dispatched_with_its_section(
    tmp_path: Path,
) -> None:
    config = _load(tmp_path, "toy:\n  greeting: ahoy\n")
    async with open_daemon(config, (TOY,), memory=None) as daemon:
        task = Task("greet", "TOY", "TEXT", None, (("ID", "t-1"), ("NAME", "ada")))
        reply = await daemon.dispatcher.run(task, Peer("test"))
    assert reply.status is Status.OK
    assert reply.fields == (("ID", "t-1"), ("SCOPE", "[toy]"), ("DATA", "ahoy, ada"))


def test_a_reload_applies_an_owned_sections_reloadable_key_and_keeps_its_restart_only_one(
    tmp_path: Path,
) -> None:
    """Issue 23: a change inside a specialist's own section was one opaque ``sections`` path,
    always kept for a restart; now its keys are planned one by one like the core's."""
    running = _load(tmp_path, "toy:\n  greeting: ahoy\n")
    new = _load(tmp_path, f"toy:\n  greeting: hej\n  key_path: {tmp_path}/k\n")
    plan = plan_reload(running, new, *reload_paths(CATALOGUE))
    assert (plan.applied, plan.needs_restart) == (("toy.greeting",), ("toy.key_path",))
    assert section_of(plan.config, "toy", ToyConfig) == ToyConfig("hej", None)


def test_a_reload_reads_a_section_the_file_leaves_out_as_its_defaults(tmp_path: Path) -> None:
    added = plan_reload(_load(tmp_path, ""), _load(tmp_path, "toy:\n  greeting: hej\n"))
    removed = plan_reload(_load(tmp_path, "toy:\n  greeting: hej\n"), _load(tmp_path, ""))
    assert added.needs_restart == removed.needs_restart == ("toy.greeting",)
    assert plan_reload(_load(tmp_path, ""), _load(tmp_path, "toy: {}\n")).needs_restart == ()


async def test_sighup_applies_an_owned_sections_key_to_the_next_task(tmp_path: Path) -> None:
    config = _load(tmp_path, "toy:\n  greeting: ahoy\n")
    new = _load(tmp_path, "toy:\n  greeting: hej\n")
    task = Task("greet", "TOY", "TEXT", None, (("ID", "t-1"), ("NAME", "ada")))
    async with open_daemon(config, (TOY,), memory=None) as daemon:
        assert (await daemon.dispatcher.run(task, Peer("t"))).get("DATA") == "ahoy, ada"
        plan = await reload_settings(daemon, lambda: new)
        assert plan is not None
        assert plan.applied == ("toy.greeting",)
        assert (await daemon.dispatcher.run(task, Peer("t"))).get("DATA") == "hej, ada"


@pytest.mark.parametrize(
    "key", ["web", "tool.exec", "tool.exec.shell_program", "daemon.state_dir.x"]
)
def test_a_section_key_that_hides_a_core_or_owned_setting_is_a_catalogue_bug(key: str) -> None:
    """Loaded there, the core's own setting (``web``), or one in another specialist's own
    section (the tool's ``tool.exec``), would be silently dropped: refused at load."""
    with pytest.raises(ValueError, match="config sections named twice"):
        config_from_mapping({}, sections=(*config_sections(), SectionSpec(key, ToyConfig)))


def test_a_dotted_section_key_inside_another_specialists_section_is_loaded_there() -> None:
    sections = (*config_sections(), SectionSpec("tool.toy", ToyConfig))
    config = config_from_mapping(
        {"tool": {"toy": {"greeting": "hi"}, "cron": {"max_jobs": 3}}}, sections=sections
    )
    assert section_of(config, "tool.toy", ToyConfig) == ToyConfig("hi")
    assert tool_section(config).cron.max_jobs == 3
    with pytest.raises(ConfigError, match=r"^tool\.toy\.greting: unknown key$"):
        config_from_mapping({"tool": {"toy": {"greting": 1}}}, sections=sections)


def test_a_reload_plans_a_key_of_a_section_nested_in_another_in_the_inner_one() -> None:
    """``tool.toy`` lies inside the tool's own section (``tool``): its change is planned in
    the toy's section, the innermost holding it, and the tool's is left as it was."""
    sections = (*config_sections(), SectionSpec("tool.toy", ToyConfig))
    running = config_from_mapping({"tool": {"cron": {"max_jobs": 3}}}, sections=sections)
    new = config_from_mapping(
        {"tool": {"cron": {"max_jobs": 3}, "toy": {"greeting": "hej"}}}, sections=sections
    )
    plan = plan_reload(running, new, ("tool",))
    assert (plan.applied, plan.needs_restart) == (("tool.toy.greeting",), ())
    assert section_of(plan.config, "tool.toy", ToyConfig) == ToyConfig("hej")
    assert tool_section(plan.config) == tool_section(running)
