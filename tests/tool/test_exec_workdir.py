"""WORKING_DIR is used as checked: no window to swap it for a symlink (security review)."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from csp_web.core.api.errors import OpError
from protocol import ErrorCode
from specialists.tool.exec import ExecRequest, prepare_command
from specialists.tool.exec._request import open_working_dir
from specialists.tool.exec._sandbox import wrap_argv
from specialists.tool.exec.config import ProgramRule
from tests.tool.exec_support import bare_sandbox, make_config, scratch_dir


def test_checked_dir_swapped_for_a_symlink_is_refused() -> None:
    outside = tempfile.mkdtemp(prefix="csp-outside-", dir="/tmp")
    try:
        with scratch_dir() as workspace:
            checked = os.path.join(workspace, "a")
            os.mkdir(checked)
            config = make_config(workspace)
            os.close(open_working_dir(checked, config))  # fine before the swap
            os.rmdir(checked)
            os.symlink(outside, checked)  # what a running command could do in between
            with pytest.raises(OpError) as info:
                open_working_dir(checked, config)
            assert info.value.code == "permission_denied"
    finally:
        shutil.rmtree(outside, ignore_errors=True)


def test_intermediate_component_swapped_for_a_symlink_is_refused() -> None:
    outside = tempfile.mkdtemp(prefix="csp-outside-", dir="/tmp")
    os.mkdir(os.path.join(outside, "b"))
    try:
        with scratch_dir() as workspace:
            os.makedirs(os.path.join(workspace, "a", "b"))
            checked = os.path.join(workspace, "a", "b")
            shutil.rmtree(os.path.join(workspace, "a"))
            os.symlink(outside, os.path.join(workspace, "a"))
            with pytest.raises(OpError):
                open_working_dir(checked, make_config(workspace))
    finally:
        shutil.rmtree(outside, ignore_errors=True)


def test_descriptor_opened_is_the_directory_itself() -> None:
    with scratch_dir() as workspace:
        inner = os.path.join(workspace, "x", "y")
        os.makedirs(inner)
        fd = open_working_dir(inner, make_config(workspace))
        try:
            assert os.readlink(f"/proc/self/fd/{fd}") == inner
        finally:
            os.close(fd)


def test_sandbox_binds_the_descriptor_not_the_path() -> None:
    with scratch_dir() as workspace:
        config = make_config(workspace)
        sandbox = bare_sandbox()
        bwrapped = type(sandbox)(
            "bwrap", sandbox.prlimit, sandbox.setpriv, sandbox.run_as, bwrap="/usr/bin/bwrap"
        )
        argv = wrap_argv(
            ["/bin/true"],
            sandbox=bwrapped,
            config=config,
            working_dir=workspace,
            timeout_ms=1000,
            working_dir_fd=7,
        )
        at = argv.index("--bind-fd")
        assert argv[at + 1 : at + 3] == ["7", workspace]
        assert "--bind" not in argv


@pytest.mark.parametrize("through", ["/proc/1/root", "/proc/self/root", "/proc/1/cwd/.."])
def test_a_working_dir_through_proc_is_permission_denied_not_internal_error(through: str) -> None:
    # /proc/1/root once raised PermissionError out of realpath: internal_error (issue 22).
    with scratch_dir() as workspace:
        working_dir = through + workspace
        with pytest.raises(OpError) as info:
            prepare_command(
                ExecRequest("true", working_dir=working_dir),
                make_config(workspace),
                sandbox=bare_sandbox(),
            )
        assert (info.value.code, info.value.detail) == (ErrorCode.PERMISSION_DENIED, working_dir)


@pytest.mark.parametrize("program", ["/proc/1/root/usr/bin/ls", "/proc/self/root/usr/bin/ls"])
def test_a_program_through_proc_is_permission_denied_not_internal_error(program: str) -> None:
    with scratch_dir() as workspace:
        config = make_config(workspace)
        rules = (*config.allowed_programs, ProgramRule("/usr/bin/ls"))
        config = type(config)(workspace_roots=(workspace,), allowed_programs=rules)
        with pytest.raises(OpError) as info:
            prepare_command(ExecRequest(program), config, sandbox=bare_sandbox())
        assert (info.value.code, info.value.detail) == (ErrorCode.PERMISSION_DENIED, program)


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("out", ErrorCode.PERMISSION_DENIED),  # a symlink to /etc
        ("loop", ErrorCode.INVALID_FIELD),  # a symlink to itself: not a directory
        ("../../etc", ErrorCode.PERMISSION_DENIED),
        ("file", ErrorCode.INVALID_FIELD),
        ("missing", ErrorCode.INVALID_FIELD),
    ],
)
def test_a_working_dir_that_leads_nowhere_usable_gets_a_catalogue_code(
    name: str, code: ErrorCode
) -> None:
    with scratch_dir() as workspace:
        os.symlink("/etc", os.path.join(workspace, "out"))
        os.symlink("loop", os.path.join(workspace, "loop"))
        open(os.path.join(workspace, "file"), "w").close()
        request = ExecRequest("true", working_dir=os.path.join(workspace, name))
        with pytest.raises(OpError) as info:
            prepare_command(request, make_config(workspace), sandbox=bare_sandbox())
        assert info.value.code == code
