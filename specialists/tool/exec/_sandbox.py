"""The OS boundary: what the host offers, probed once, and the argv that wraps each command.

With bubblewrap every command runs as::

    [sh -c ENTER sh <tasks | cgroup.procs>... --] [setpriv --reuid --regid --clear-groups --]
        bwrap <mounts> <namespaces> -- prlimit <limits> -- [time -f '%U %S %M' -o /dev/fd/N --]
        cmd args

and without it as ``[sh -c ENTER ...] prlimit <limits> -- setpriv [--reuid ...]
--no-new-privs -- [time] cmd``. The first part moves the command into its own cgroup when the
host has one to give (see _cgroup.py); the limits then bound memory and tasks there, and
prlimit keeps only the per-process rlimits that a cgroup does not replace. With a cgroup those
are set by that shell's ``ulimit`` instead, and prlimit leaves the chain (see _limits.py).

The working directory is the one writable host directory. The protected paths in it are
bound read-only onto themselves and the directories on the way to them onto themselves
(mount points cannot be renamed): see _protect.py.

Every tmpfs is bounded: /tmp and /dev/shm hold ``tmp_size_bytes`` each, and the masks (empty
tmpfs over /run, /home, the daemon's state...) and /dev itself are remounted read-only, so no
write into them can take host memory.

setpriv comes first when the daemon is root. bwrap run by root with ``--uid`` only *looks*
unprivileged: its user namespace maps the sandbox uid onto real uid 0, so root-owned files
(/root, 0600 secrets) stay readable (checked on this host with bwrap 0.8.0). Dropping the real
uid before bwrap makes bwrap unprivileged, so its user namespace maps nobody to nobody.

Without bubblewrap the command still gets the limits, the uid switch, ``no_new_privs`` (so
sudo and other setuid programs cannot raise it back), a clean environment and a new session;
it does not get a read-only filesystem, a private /tmp, hidden paths or a network boundary.

Deployment: bwrap's monitor exits without reaping the sandbox's init, which is re-parented to
the host's PID 1. Run the daemon under an init that reaps (systemd, ``docker run --init``),
never as PID 1 itself, or those zombies pile up (and count against the uid's RLIMIT_NPROC).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import trio

from specialists.tool.exec.config import ExecConfig

from ._access import RunAs, may_search
from ._cgroup import CgroupHost, CommandCgroup, find_cgroup_host, remove_leftovers
from ._errors import unavailable
from ._limits import prlimit_argv, ulimit_script
from ._protect import Layout

SandboxKind = Literal["bwrap", "none"]

# Options newer than some bwrap still shipped (--size needs 0.5-ish, --disable-userns 0.8):
# used when ``bwrap --help`` lists them, rather than trusting version numbers.
_OPTIONAL = frozenset({"--size", "--disable-userns"})
_PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Sandbox:
    """The host's sandboxing, found by ``probe_sandbox``; log ``kind`` and ``reason`` at start."""

    kind: SandboxKind
    prlimit: str
    setpriv: str
    run_as: RunAs | None
    time: str | None = None  # GNU time, which reports CPU and peak RSS from inside
    bwrap: str | None = None
    bwrap_options: frozenset[str] = frozenset()
    hidden: tuple[str, ...] = ()  # paths the command cannot see (bwrap only)
    reason: str = ""  # why kind is "none"
    # The daemon's own paths: never a working directory, masked wherever bwrap can reach.
    private: tuple[str, ...] = ()
    cgroup: CgroupHost | None = None  # where each command gets its cgroup, if anywhere
    cgroup_reason: str = ""  # why cgroup is None
    # RLIMIT_NPROC without a cgroup. Without bwrap it is one budget for every command of the
    # sandbox uid, so it is max_processes times the commands that may run at once.
    nproc: int = 10

    @property
    def limits(self) -> str:
        """What bounds memory and tasks: "cgroup2", "cgroup1" or "rlimit"."""
        return self.cgroup.kind if self.cgroup is not None else "rlimit"


async def probe_sandbox(
    config: ExecConfig, *, private: Sequence[str] = (), concurrent: int = 1
) -> Sandbox:
    """Find prlimit, setpriv, a cgroup to give each command, and a bwrap that really runs
    here (a smoke run of ``true``).

    ``private`` are the daemon's own paths; ``concurrent`` is how many commands may run at
    once (it sizes the uid-wide RLIMIT_NPROC when neither bwrap nor a cgroup is there).
    Raises NOT_AVAILABLE when prlimit or setpriv is missing (the limits are not optional) or
    when ``require_bwrap`` is set and bwrap cannot run; otherwise a missing or failing bwrap
    gives ``kind="none"`` with the reason.
    """
    prlimit, setpriv = _which("prlimit", config), _which("setpriv", config)
    if prlimit is None or setpriv is None:
        raise unavailable("prlimit" if prlimit is None else "setpriv")
    run_as = RunAs(config.run_as_uid, config.run_as_gid) if os.geteuid() == 0 else None
    time = await _gnu_time(config)
    cgroup, cgroup_reason = _cgroup_host(config)
    if cgroup is not None:
        await remove_leftovers(cgroup)  # a daemon killed mid-command removed none of its own
    bare = Sandbox(
        "none",
        prlimit,
        setpriv,
        run_as,
        time,
        private=_real_paths(private),
        cgroup=cgroup,
        cgroup_reason=cgroup_reason,
        nproc=config.max_processes * max(1, concurrent),
    )
    if config.bwrap_program is None:
        return _without_bwrap(bare, "bwrap_program is not set", config)
    bwrap = _which(config.bwrap_program, config)
    if bwrap is None:
        return _without_bwrap(bare, f"{config.bwrap_program} not found", config)
    options = await _bwrap_options(bwrap)
    sandbox = replace(
        bare,
        kind="bwrap",
        bwrap=bwrap,
        bwrap_options=options,
        reason="",
        hidden=config.masked_paths,
        nproc=config.max_processes,  # counted in each sandbox's own user namespace
    )
    failure = await _smoke_test(sandbox, config)
    if failure:
        return _without_bwrap(bare, failure, config)
    return sandbox


def wrap_argv(
    argv: Sequence[str],
    *,
    sandbox: Sandbox,
    config: ExecConfig,
    working_dir: str | None,
    timeout_ms: int,
    report_fd: int | None = None,
    working_dir_fd: int | None = None,
    cgroup: CommandCgroup | None = None,
    layout: Layout | None = None,
    mounts: Sequence[str] = (),
) -> list[str]:
    """The full argv that runs ``argv`` (an absolute executable first) under ``sandbox``.

    With ``working_dir_fd`` (see ``open_working_dir``) bubblewrap binds that descriptor on
    ``working_dir`` instead of looking the path up again.

    With ``report_fd`` and GNU time, time runs the command and writes ``user sys maxrss_kib``
    to that descriptor when it ends; it sits after prlimit so it is bounded too.

    With ``cgroup`` the chain starts by entering it, and prlimit leaves memory and processes
    to it; without, RLIMIT_AS and RLIMIT_NPROC (``sandbox.nproc``) stand in.

    ``layout`` (see _protect.py) says which paths inside the working directory bubblewrap
    binds onto themselves, read-only or as anchors, and whether the directory is read-only.

    ``mounts`` are more bubblewrap options, placed after the working directory (a network
    lane's directory: _network.py); ignored without bubblewrap.
    """
    nproc = None if cgroup is not None else sandbox.nproc
    limits = prlimit_argv(sandbox.prlimit, config, timeout_ms=timeout_ms, nproc=nproc)
    # With a cgroup its entering shell runs anyway and sets these: see _limits.py.
    in_shell = ulimit_script(config, timeout_ms=timeout_ms) if cgroup is not None else None
    if in_shell:
        limits = []
    measure = _time(sandbox, report_fd)
    enter = cgroup.enter_argv(in_shell or "") if cgroup is not None else []
    if sandbox.kind == "bwrap":
        # setpriv, not Popen(user=...): a uid switch makes Popen fork instead of vfork, 10.6 ms
        # of CPU in a daemon of 150 MB RSS against setpriv's 2.0 ms (bench/exec_spawn.py).
        drop = _setpriv(sandbox, no_new_privs=False) if sandbox.run_as else []
        sandboxed = _bwrap(sandbox, config, working_dir, working_dir_fd, layout or Layout())
        sandboxed[-1:-1] = mounts  # before the final "--"
        return [*enter, *drop, *sandboxed, *limits, *measure, *argv]
    return [*enter, *limits, *_setpriv(sandbox, no_new_privs=True), *measure, *argv]


def _real_paths(paths: Sequence[str]) -> tuple[str, ...]:
    return tuple(os.path.realpath(path) for path in paths)


def _cgroup_host(config: ExecConfig) -> tuple[CgroupHost | None, str]:
    if config.cgroup == "off":
        return None, "cgroup is off"
    found = find_cgroup_host(
        config.cgroup_parent,
        shell=_which("sh", config),
        memory_bytes=config.max_memory_bytes,
        max_tasks=config.max_processes,
    )
    return (None, found) if isinstance(found, str) else (found, "")


def _time(sandbox: Sandbox, report_fd: int | None) -> list[str]:
    if sandbox.time is None or report_fd is None:
        return []
    return [sandbox.time, "-q", "-f", "%U %S %M", "-o", f"/dev/fd/{report_fd}", "--"]


def _bwrap(
    sandbox: Sandbox,
    config: ExecConfig,
    working_dir: str | None,
    working_dir_fd: int | None,
    layout: Layout,
) -> list[str]:
    assert sandbox.bwrap is not None
    sized = "--size" in sandbox.bwrap_options
    # Each path resolved once here; the comparisons below are on resolved paths.
    masks = _outermost({os.path.realpath(p) for p in config.masked_paths}, os.path.realpath("/tmp"))
    args = [sandbox.bwrap, "--ro-bind", "/", "/"]
    empty: list[str] = []  # mask tmpfs, remounted read-only once every mount is placed
    for path in masks:
        args += _mask(path, sized=sized, empty=empty)
    args += _sized_tmpfs("/tmp", config, sized)
    if working_dir is not None:  # after the masks and /tmp, so it shows through both
        ro = "ro-" if layout.working_dir_readonly else ""
        if working_dir_fd is not None:
            args += [f"--{ro}bind-fd", str(working_dir_fd), working_dir]
        else:
            args += [f"--{ro}bind", working_dir, working_dir]
        for option, path in layout.mounts():  # before the masks: they may lie inside
            args += [option, path, path]
        # ...and the daemon's paths and masks again: one under the working dir (placed there
        # after the checks) would otherwise lay the real directory back, writable.
        real_dir = os.path.realpath(working_dir)
        for path in [*masks, *_real_paths(sandbox.private)]:
            if _inside(path, real_dir) and may_search(os.path.dirname(path), sandbox.run_as):
                args += _mask(path, sized=sized, empty=empty)
    args += ["--proc", "/proc", "--dev", "/dev", *_sized_tmpfs("/dev/shm", config, sized)]
    for path in [*dict.fromkeys(empty), "/dev"]:
        if path != working_dir:  # a bind placed there covers the mask; it stays writable
            args += ["--remount-ro", path]
    args += ["--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc"]
    args += ["--unshare-uts", "--unshare-cgroup-try"]
    # --die-with-parent: SIGKILL to bwrap kills the namespace's init, and with it every
    # process in the PID namespace, setsid'd or not. It fires when the thread that forked bwrap
    # exits, so the engine forks from threads that live as long as the daemon (_spawner.py).
    # --new-session: no TIOCSTI into a tty.
    args += ["--die-with-parent", "--new-session", "--chdir", working_dir or "/"]
    if "--disable-userns" in sandbox.bwrap_options:
        args.append("--disable-userns")  # no nested namespaces to attack the kernel through
    # No --clearenv: the process is started with exactly the allowed environment, and
    # --setenv would put values on bwrap's command line, which every user can read in /proc.
    return [*args, "--"]


def _inside(path: str, directory: str) -> bool:
    """``path`` is ``directory`` or lies in it; both already resolved (realpath): resolving
    them again for every pair was half of building the argv: 0.3 ms, now 0.17 ms of CPU."""
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _outermost(paths: set[str], tmp: str) -> list[str]:
    """The masks worth placing (``paths`` and ``tmp`` resolved): one under another mask, or
    under the private /tmp, is hidden by that tmpfs already (and a remount of it would no
    longer find it)."""
    kept: list[str] = []
    for path in sorted(paths, key=len):
        if not any(_inside(path, outer) for outer in [*kept, tmp]):
            kept.append(path)
    return kept


def _sized_tmpfs(path: str, config: ExecConfig, sized: bool) -> list[str]:
    return [*(["--size", str(config.tmp_size_bytes)] if sized else []), "--tmpfs", path]


def _mask(path: str, *, sized: bool, empty: list[str]) -> list[str]:
    """An empty tmpfs over a directory (noted in ``empty``, to be made read-only), /dev/null
    over a file, nothing for a path that does not exist."""
    path = os.path.realpath(path)  # /var/run -> /run: mount over what the link names
    if os.path.isdir(path):
        empty.append(path)
        return [*(["--size", "4096"] if sized else []), "--tmpfs", path]
    if os.path.lexists(path):
        return ["--ro-bind", "/dev/null", path]
    return []


def _setpriv(sandbox: Sandbox, *, no_new_privs: bool) -> list[str]:
    args = [sandbox.setpriv]
    if sandbox.run_as is not None:
        uid, gid = sandbox.run_as.uid, sandbox.run_as.gid
        args += [f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
    if no_new_privs:
        args.append("--no-new-privs")
    return [*args, "--"]


def _which(program: str, config: ExecConfig) -> str | None:
    return shutil.which(program, path=config.search_path)


def _without_bwrap(bare: Sandbox, reason: str, config: ExecConfig) -> Sandbox:
    if config.require_bwrap:
        raise unavailable(f"bwrap: {reason}")
    return replace(bare, reason=reason)


async def _gnu_time(config: ExecConfig) -> str | None:
    """GNU time's path, or None: busybox and BSD time take other options."""
    time = _which("time", config)
    if time is None:
        return None
    with trio.move_on_after(_PROBE_TIMEOUT_S):
        done = await trio.run_process(
            [time, "--version"], capture_stdout=True, capture_stderr=True, check=False
        )
        return time if b"GNU" in done.stdout + done.stderr else None
    return None


async def _bwrap_options(bwrap: str) -> frozenset[str]:
    with trio.move_on_after(_PROBE_TIMEOUT_S):
        done = await trio.run_process([bwrap, "--help"], capture_stdout=True, check=False)
        return _OPTIONAL & set(re.findall(r"--[a-z-]+", done.stdout.decode(errors="replace")))
    return frozenset()


async def _smoke_test(sandbox: Sandbox, config: ExecConfig) -> str:
    """Empty if the sandbox runs ``true``; else bwrap's complaint (e.g. no user namespaces)."""
    true = _which("true", config) or "/bin/true"
    argv = wrap_argv([true], sandbox=sandbox, config=config, working_dir=None, timeout_ms=1000)
    with trio.move_on_after(_PROBE_TIMEOUT_S):
        done = await trio.run_process(argv, env={}, capture_stderr=True, check=False)
        if done.returncode == 0:
            return ""
        return done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
    return "bwrap smoke test timed out"
