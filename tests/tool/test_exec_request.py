"""Request fields and the filesystem checks: timeout bounds, env names, working directory,
executable resolution. Nothing is spawned."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace

import pytest

from csp_web.core.api.errors import OpError
from protocol import ErrorCode
from specialists.tool.exec import ExecRequest, prepare_command
from specialists.tool.exec.config import ExecConfig, ProgramRule

from .exec_support import IS_ROOT, bare_sandbox, make_config, scratch_dir


@pytest.fixture
def workspace() -> Iterator[str]:
    with scratch_dir() as path:
        yield path


def prepare(request: ExecRequest, config: ExecConfig) -> None:
    prepare_command(request, config, sandbox=bare_sandbox())


def refusal(request: ExecRequest, config: ExecConfig) -> OpError:
    with pytest.raises(OpError) as caught:
        prepare(request, config)
    return caught.value


def test_timeout_defaults_to_the_seed_30_seconds(workspace: str) -> None:
    prepared = prepare_command(ExecRequest("true"), make_config(workspace), sandbox=bare_sandbox())
    assert prepared.timeout_ms == 30_000


def test_timeout_at_the_cap_is_accepted_and_one_more_ms_is_invalid(workspace: str) -> None:
    config = make_config(workspace, default_timeout_ms=1_000, max_timeout_ms=5_000)
    prepare(ExecRequest("true", timeout_ms=5_000), config)
    error = refusal(ExecRequest("true", timeout_ms=5_001), config)
    assert (error.code, error.detail) == (ErrorCode.INVALID_FIELD, "TIMEOUT_MS")


def test_timeout_of_one_ms_is_accepted_and_zero_is_invalid(workspace: str) -> None:
    prepare(ExecRequest("true", timeout_ms=1), make_config(workspace))
    error = refusal(ExecRequest("true", timeout_ms=0), make_config(workspace))
    assert error.code == ErrorCode.INVALID_FIELD


def test_allowed_env_name_is_added_over_the_engine_environment(workspace: str) -> None:
    prepared = prepare_command(
        ExecRequest("true", env={"NODE_ENV": "test"}),
        make_config(workspace),
        sandbox=bare_sandbox(),
    )
    assert prepared.env["NODE_ENV"] == "test"
    assert prepared.env["HOME"] == workspace
    assert prepared.env["TMPDIR"] == "/tmp"


def test_env_name_off_the_allow_list_is_blocked_by_name(workspace: str) -> None:
    error = refusal(ExecRequest("true", env={"LD_PRELOAD": "/tmp/x.so"}), make_config(workspace))
    assert (error.code, error.detail) == (ErrorCode.COMMAND_BLOCKED, "LD_PRELOAD")


@pytest.mark.parametrize("env", [{"1BAD": "x"}, {"A=B": "x"}, {"": "x"}, {"CI": "a\0b"}])
def test_malformed_env_is_an_invalid_field(workspace: str, env: dict[str, str]) -> None:
    error = refusal(ExecRequest("true", env=env), make_config(workspace))
    assert (error.code, error.detail) == (ErrorCode.INVALID_FIELD, "ENV")


def test_working_dir_defaults_to_the_first_workspace_root(workspace: str) -> None:
    prepared = prepare_command(ExecRequest("true"), make_config(workspace), sandbox=bare_sandbox())
    assert prepared.working_dir == workspace


def test_working_dir_below_a_root_is_used_realpathed(workspace: str) -> None:
    os.makedirs(os.path.join(workspace, "a", "b"))
    request = ExecRequest("true", working_dir=os.path.join(workspace, "a", "..", "a", "b"))
    prepared = prepare_command(request, make_config(workspace), sandbox=bare_sandbox())
    assert prepared.working_dir == os.path.join(workspace, "a", "b")


def test_working_dir_outside_every_root_is_permission_denied_with_exit_126(
    workspace: str,
) -> None:
    error = refusal(ExecRequest("true", working_dir="/etc"), make_config(workspace))
    assert (error.code, error.detail, error.data) == (
        ErrorCode.PERMISSION_DENIED,
        "/etc",
        "exit:126",
    )


def test_sibling_with_the_root_as_name_prefix_is_outside_the_root(workspace: str) -> None:
    sibling = workspace + "-evil"
    os.mkdir(sibling)
    try:
        error = refusal(ExecRequest("true", working_dir=sibling), make_config(workspace))
    finally:
        os.rmdir(sibling)
    assert error.code == ErrorCode.PERMISSION_DENIED


def test_symlink_out_of_the_root_is_permission_denied(workspace: str) -> None:
    link = os.path.join(workspace, "escape")
    os.symlink("/etc", link)
    error = refusal(ExecRequest("true", working_dir=link), make_config(workspace))
    assert error.code == ErrorCode.PERMISSION_DENIED


def test_missing_outside_path_is_denied_before_its_existence_is_checked(workspace: str) -> None:
    error = refusal(ExecRequest("true", working_dir="/no/such/dir"), make_config(workspace))
    assert error.code == ErrorCode.PERMISSION_DENIED


@pytest.mark.parametrize("suffix", ["missing", "file"])
def test_working_dir_that_is_no_directory_is_an_invalid_field(workspace: str, suffix: str) -> None:
    with open(os.path.join(workspace, "file"), "w"):
        pass
    error = refusal(
        ExecRequest("true", working_dir=os.path.join(workspace, suffix)), make_config(workspace)
    )
    assert (error.code, error.detail) == (ErrorCode.INVALID_FIELD, "WORKING_DIR")


def test_relative_working_dir_is_an_invalid_field(workspace: str) -> None:
    error = refusal(ExecRequest("true", working_dir="src"), make_config(workspace))
    assert error.code == ErrorCode.INVALID_FIELD


def test_working_dir_the_sandbox_user_cannot_enter_is_denied(workspace: str) -> None:
    # As root the check reads mode bits for nobody; otherwise os.access answers for us.
    locked = os.path.join(workspace, "locked")
    os.mkdir(locked, 0o700)
    if not IS_ROOT:
        os.chmod(locked, 0o000)
    error = refusal(ExecRequest("true", working_dir=locked), make_config(workspace))
    assert error.code == ErrorCode.PERMISSION_DENIED


def test_no_configured_root_makes_exec_not_available() -> None:
    error = refusal(ExecRequest("true"), ExecConfig())
    assert error.code == ErrorCode.NOT_AVAILABLE


def test_program_missing_from_the_search_path_fails_with_exit_127(workspace: str) -> None:
    config = make_config(workspace, allowed_programs=(ProgramRule("no-such-tool"),))
    error = refusal(ExecRequest("no-such-tool"), config)
    assert (error.code, error.detail, error.data) == (
        ErrorCode.COMMAND_FAILED,
        "no-such-tool",
        "exit:127",
    )


def test_program_the_sandbox_user_may_not_execute_is_denied_with_exit_126(workspace: str) -> None:
    # The seed's permission_denied:/usr/local/bin/restricted, with a directory of our own.
    with scratch_dir(owner=None) as bin_dir:
        restricted = os.path.join(bin_dir, "restricted")
        with open(restricted, "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(restricted, 0o744 if IS_ROOT else 0o644)
        config = make_config(
            workspace, allowed_programs=(ProgramRule("restricted"),), search_path=bin_dir
        )
        error = refusal(ExecRequest("restricted"), config)
    assert (error.code, error.detail, error.data) == (
        ErrorCode.PERMISSION_DENIED,
        restricted,
        "exit:126",
    )


def test_later_search_path_entry_is_used_when_an_earlier_one_is_not_executable(
    workspace: str,
) -> None:
    with scratch_dir(owner=None) as first, scratch_dir(owner=None) as second:
        for directory, mode in ((first, 0o644), (second, 0o755)):
            path = os.path.join(directory, "tool")
            with open(path, "w") as f:
                f.write("#!/bin/sh\n")
            os.chmod(path, mode)
        config = make_config(
            workspace, allowed_programs=(ProgramRule("tool"),), search_path=f"{first}:{second}"
        )
        prepared = prepare_command(ExecRequest("tool"), config, sandbox=bare_sandbox())
        assert prepared.argv == (os.path.join(second, "tool"),)


def test_program_under_a_masked_path_is_not_found_in_the_sandbox_view(workspace: str) -> None:
    with scratch_dir(owner=None) as bin_dir:
        tool = os.path.join(bin_dir, "tool")
        with open(tool, "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(tool, 0o755)
        config = make_config(
            workspace,
            allowed_programs=(ProgramRule("tool"),),
            search_path=bin_dir,
            masked_paths=(bin_dir,),
        )
        hidden = replace(bare_sandbox(), kind="bwrap", hidden=(bin_dir,))
        with pytest.raises(OpError) as caught:
            prepare_command(ExecRequest("tool"), config, sandbox=hidden)
    assert (caught.value.code, caught.value.data) == (ErrorCode.COMMAND_FAILED, "exit:127")
