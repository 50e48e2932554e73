"""A workspace of $HOME cannot change or create the protected paths in it (issue 22).

Each test runs real commands in bubblewrap, in a scratch directory that plays the daemon
user's home ($HOME points at it, so ``~`` in ``protected_paths`` expands there and the real
home is never touched), and compares the host's files before and after.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import replace

import pytest
import trio

from csp_web.core.api.errors import OpError
from protocol import ErrorCode
from specialists.tool.exec import ExecRequest, ExecResult, Sandbox, run_command
from specialists.tool.exec.config import DEFAULT_PROTECTED, ExecConfig

from .exec_support import IS_ROOT, NOBODY, make_config, probe, scratch_dir

_NAMES = [entry.removeprefix("~/") for entry in DEFAULT_PROTECTED]


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A scratch home owned by the sandbox user, as $HOME for this test."""
    with scratch_dir() as path:
        monkeypatch.setenv("HOME", path)
        yield path


def _fill(home: str) -> None:
    """Every protected path, present with content (files) or a file inside (directories)."""
    for name in _NAMES:
        path = os.path.join(home, name.rstrip("/"))
        if name.endswith("/"):
            os.makedirs(path)
            with open(os.path.join(path, "kept"), "w") as f:
                f.write("original\n")
        else:
            with open(path, "w") as f:
                f.write("original\n")
    _chown_tree(home)


def _chown_tree(top: str) -> None:
    if not IS_ROOT:
        return
    for directory, subdirs, files in os.walk(top):
        for name in [*subdirs, *files]:
            os.lchown(os.path.join(directory, name), NOBODY, NOBODY)


def _snapshot(top: str) -> dict[str, str]:
    """Every entry under ``top``: its kind, and a file's content hash or a link's target."""
    seen = {}
    for directory, subdirs, files in os.walk(top):
        for name in [*subdirs, *files]:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                seen[path] = "link:" + os.readlink(path)
            elif os.path.isdir(path):
                seen[path] = "dir"
            else:
                with open(path, "rb") as f:
                    seen[path] = hashlib.sha256(f.read()).hexdigest()
    return seen


def _attack(name: str) -> str:
    """Shell lines trying every way to change or create ``name`` (errors ignored)."""
    p = name.rstrip("/")
    return (
        f"echo evil >> {p}; echo evil > {p}; rm -rf {p}; mv {p} {p}.old; "
        f"mkdir -p {p}; touch {p}/x; echo evil > {p}/kept; ln -s /etc/passwd {p}; "
        f"chmod 777 {p}; touch -d 2001-01-01 {p}; mv {p}/kept {p}/moved; "
    )


async def _run(command: str, config: ExecConfig, sandbox: Sandbox, cwd: str) -> ExecResult:
    with trio.fail_after(60):
        return await run_command(
            ExecRequest(command, working_dir=cwd, shell=True), config, sandbox=sandbox
        )


@pytest.mark.parametrize("present", [True, False], ids=["present", "missing"])
async def test_a_home_workspace_cannot_change_or_create_any_protected_path(
    home: str, present: bool
) -> None:
    if present:
        _fill(home)
    config = make_config(home)
    sandbox = await probe(config, "bwrap")
    before = _snapshot(home)
    attacks = "".join(_attack(name) for name in _NAMES)
    parents = "mv .local .l2; mv .config .c2; mkdir -p .local/bin .config/x; "
    result = await _run(attacks + parents + "true", config, sandbox, home)
    assert result.exit_code == 0, result.stderr
    assert _snapshot(home) == before  # nothing changed, nothing created, no placeholder left
    assert "Read-only file system" in result.stderr


async def test_writes_to_protected_paths_fail_with_erofs_or_ebusy(home: str) -> None:
    _fill(home)
    config = make_config(home)
    sandbox = await probe(config, "bwrap")
    checks = {
        "echo evil >> .bashrc": "Read-only file system",
        "mv .config .c2": "Device or resource busy",
        "mv .ssh/kept .ssh/moved": "Read-only file system",
        "rm .profile": "Device or resource busy",
    }
    for command, error in checks.items():
        result = await _run(command, config, sandbox, home)
        assert result.exit_code != 0, command
        assert error in result.stderr, (command, result.stderr)


async def test_a_protected_file_survives_the_rename_of_its_writable_parents(home: str) -> None:
    conf = os.path.join(home, "proj", "conf", "app.yaml")
    os.makedirs(os.path.dirname(conf))
    with open(conf, "w") as f:
        f.write("original\n")
    _chown_tree(home)
    config = replace(make_config(home), protected_paths=(conf,))
    sandbox = await probe(config, "bwrap")
    before = os.stat(conf).st_ino
    command = (
        "mv proj proj.old; mv proj/conf proj/conf.old; rm -rf proj/conf;"
        " mkdir -p proj/conf; echo evil > proj/conf/app.yaml; touch proj/free; true"
    )
    result = await _run(command, config, sandbox, home)
    assert result.exit_code == 0
    assert os.stat(conf).st_ino == before
    with open(conf) as f:
        assert f.read() == "original\n"
    assert os.path.exists(os.path.join(home, "proj", "free"))  # the parents stay writable
    assert sorted(os.listdir(home)) == ["proj"]


async def test_a_placeholder_outlives_the_command_that_made_it_while_another_holds_it(
    home: str,
) -> None:
    config = make_config(home)
    sandbox = await probe(config, "bwrap")
    results: dict[str, ExecResult] = {}

    def waiting(name: str, then: str) -> str:  # bounded by the test's fail_after
        return f"touch {name}.up; while [ ! -e {name}.go ]; do sleep 0.01; done; {then}"

    async def run(name: str, command: str) -> None:
        results[name] = await _run(command, config, sandbox, home)

    async def wait_for(path: str) -> None:
        with trio.fail_after(30):
            while not os.path.exists(os.path.join(home, path)):
                await trio.sleep(0.01)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "maker", waiting("maker", "true"))
        await wait_for("maker.up")  # its placeholders are in place
        nursery.start_soon(run, "holder", waiting("holder", "echo evil > .bashrc; mkdir .ssh"))
        await wait_for("holder.up")
        open(os.path.join(home, "maker.go"), "w").close()
        await wait_for(".bashrc")  # present while the holder runs...
        while "maker" not in results:
            await trio.sleep(0.01)
        assert os.path.isfile(os.path.join(home, ".bashrc"))  # ...and after the maker ended
        open(os.path.join(home, "holder.go"), "w").close()
    assert "Read-only file system" in results["holder"].stderr
    assert results["holder"].exit_code != 0
    assert sorted(os.listdir(home)) == ["holder.go", "holder.up", "maker.go", "maker.up"]


async def test_a_placeholder_parent_with_the_commands_files_in_it_is_kept(home: str) -> None:
    config = make_config(home)
    sandbox = await probe(config, "bwrap")
    result = await _run(
        "mkdir -p .local/share && echo mine > .local/share/f", config, sandbox, home
    )
    assert result.exit_code == 0, result.stderr
    assert os.listdir(os.path.join(home, ".local")) == ["share"]  # .local/bin removed


async def test_git_metadata_stays_writable(home: str) -> None:
    config = make_config(home)
    sandbox = await probe(config, "bwrap")
    command = "mkdir -p .git/hooks && echo '[core]' > .git/config && echo x > .git/hooks/pre-commit"
    assert (await _run(command, config, sandbox, home)).exit_code == 0
    assert os.path.isfile(os.path.join(home, ".git", "hooks", "pre-commit"))


async def test_a_working_dir_inside_a_protected_path_is_read_only(home: str) -> None:
    _fill(home)
    config = make_config(home)
    sandbox = await probe(config, "bwrap")
    result = await _run("touch x", config, sandbox, os.path.join(home, ".config"))
    assert result.exit_code != 0
    assert "Read-only file system" in result.stderr
    assert sorted(os.listdir(os.path.join(home, ".config"))) == ["kept"]


@pytest.mark.parametrize("link", [".config", ".bashrc"])
async def test_a_symlink_in_the_working_dir_on_the_way_to_a_protected_path_is_refused(
    home: str, link: str
) -> None:
    os.makedirs(os.path.join(home, "dotfiles", "config"))
    open(os.path.join(home, "dotfiles", "bashrc"), "w").close()
    target = {".config": "dotfiles/config", ".bashrc": "dotfiles/bashrc"}[link]
    os.symlink(target, os.path.join(home, link))
    config = make_config(home)
    sandbox = await probe(config, "bwrap")
    with pytest.raises(OpError) as caught:
        await _run("true", config, sandbox, home)
    assert caught.value.code == ErrorCode.PERMISSION_DENIED
    assert caught.value.detail == os.path.join(home, link)
    # A working dir that does not hold the link runs.
    assert (await _run("true", config, sandbox, os.path.join(home, "dotfiles"))).exit_code == 0


async def test_without_bubblewrap_a_working_dir_holding_a_protected_path_is_refused(
    home: str,
) -> None:
    config = make_config(home)
    sandbox = await probe(config, "none")
    with pytest.raises(OpError) as caught:
        await _run("true", config, sandbox, home)
    assert caught.value.code == ErrorCode.PERMISSION_DENIED
    assert caught.value.detail == os.path.join(home, ".bashrc")
    os.mkdir(os.path.join(home, "proj"))
    assert (await _run("true", config, sandbox, os.path.join(home, "proj"))).exit_code == 0


async def test_a_file_where_a_protected_directorys_parent_should_be_is_anchored(
    home: str,
) -> None:
    with open(os.path.join(home, ".local"), "w") as f:  # a file, not the folder of ~/.local/bin
        f.write("original\n")
    _chown_tree(home)
    config = make_config(home)
    sandbox = await probe(config, "bwrap")
    command = "rm .local; mv .local .l2; mkdir -p .local/bin; echo evil > .local; true"
    result = await _run(command, config, sandbox, home)
    assert result.exit_code == 0
    assert "Device or resource busy" in result.stderr
    with open(os.path.join(home, ".local")) as f:
        assert f.read() == "evil\n"  # its content is the command's to change, its place not
    assert sorted(os.listdir(home)) == [".local"]


@pytest.mark.skipif(not IS_ROOT, reason="needs a folder the sandbox user (nobody) cannot search")
async def test_a_protected_path_the_sandbox_user_cannot_reach_leaves_commands_running(
    home: str,
) -> None:
    secret = os.path.join(home, "secret")
    os.mkdir(secret, 0o700)  # root's: nobody can neither search it nor bind what lies in it
    with open(os.path.join(secret, "conf"), "w") as f:
        f.write("original\n")
    config = replace(make_config(home), protected_paths=(os.path.join(secret, "conf"),))
    sandbox = await probe(config, "bwrap")
    result = await _run("mv secret s2", config, sandbox, home)
    assert "Device or resource busy" in result.stderr  # anchored: it cannot be moved aside
    assert (await _run("touch free", config, sandbox, home)).exit_code == 0


@pytest.mark.skipif(not IS_ROOT, reason="a root daemon makes the placeholders")
async def test_a_made_parent_is_owned_as_its_folder_so_it_grants_no_write() -> None:
    with scratch_dir(owner=None) as home:  # root's, 0755: nobody may write nothing here
        config = replace(make_config(home), protected_paths=(f"{home}/.local/bin/",))
        sandbox = await probe(config, "bwrap")
        result = await _run("touch .local/mine", config, sandbox, home)
        assert result.exit_code != 0
        assert "Permission denied" in result.stderr
        assert os.listdir(home) == []


@pytest.mark.parametrize("entry", ["relative/.bashrc", "~", "~root/.bashrc", "/a\0b"])
def test_a_protected_path_must_be_absolute_or_under_the_home(entry: str) -> None:
    with pytest.raises(ValueError, match="protected_paths"):
        ExecConfig(protected_paths=(entry,))
    ExecConfig(protected_paths=("~/.x", "/srv/conf/", "/"))
