"""A cgroup per command: the real bound on its total memory and on its task count.

RLIMIT_AS bounds each process's address space, not what a command uses: four processes take
four times the limit, tmpfs pages count against nothing, and V8 or a JVM, which reserve far
more than they touch, die at start. RLIMIT_NPROC counts every process of the *uid*, so
commands sharing the sandbox uid share one budget. A cgroup fixes both: ``memory.max`` (v2) or
``memory.limit_in_bytes`` (v1) bounds every page the command's processes charge, tmpfs writes
included, and ``pids.max`` bounds the tasks of this command alone.

``pids.max`` counts tasks, that is processes *and threads*: node alone runs about 11. The
kernel offers no per-command count of processes only; a policy that runs node sets
``max_processes`` for that (docs/exec-policy.md).

Where the host offers one (probed once, at start-up):

- cgroup v2: ``cgroup_parent`` if set, else the daemon's own cgroup, with the ``memory`` and
  ``pids`` controllers enabled for its children (``cgroup.subtree_control``). A non-root
  daemon needs that directory delegated to its uid (systemd ``Delegate=yes`` with
  ``DelegateSubgroup=``, then point ``cgroup_parent`` at the service's cgroup).
- cgroup v1 (hybrid hosts, many containers): the daemon's own cgroup in the ``memory`` and
  ``pids`` hierarchies, when it may create children there (normally root only).

Each command gets a fresh child ``csp-exec-<daemon pid>-s<its start>-<token>`` in each
hierarchy. The process enters it before anything of the command runs: the argv starts with
``sh -c`` writing ``0`` (itself) into each directory's entry file
(``CommandCgroup.entry_files``) and exec'ing the rest, so every later process is born inside.
After the command, whatever is left in the cgroup is killed and the cgroup removed.

A daemon killed mid-command (``kill -9``, the OOM killer) removes nothing: at start-up
``remove_leftovers`` clears the groups of daemons that are gone. The owner is told by its pid
*and* its start (clock ticks after boot, ``/proc/<pid>/stat``), which together name one process
for good: a pid alone is reused, by any process or by a restarted daemon (pid 1 in a
container, each time). Daemons sharing a host cgroup must share a pid namespace, or one may
take another's live groups for a dead daemon's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
from dataclasses import dataclass
from functools import cache
from typing import Literal

import trio

log = logging.getLogger(__name__)

CgroupKind = Literal["cgroup2", "cgroup1"]

# sh -c ENTER sh FILE... -- ARGV...: writes 0 (the writer itself) into each entry file, then
# execs ARGV. Exit 125 (the shell's own failure) if a write is refused.
ENTER_SCRIPT = (
    'for f do [ "$f" = -- ] && break; echo 0 > "$f" || exit 125; shift; done; shift; exec "$@"'
)
_PREFIX = "csp-exec-"
# The owner in a group's name: pid, then its start (s<ticks>); names from before carry no start.
_OWNER = re.compile(re.escape(_PREFIX) + r"([0-9]+)-(?:s([0-9]+)-)?.+")
_REMOVE_ROUNDS = 60  # rmdir fails while a killed task is still exiting: about 3.5 s in all


@dataclass(frozen=True, slots=True)
class CgroupHost:
    """Where per-command cgroups are made: one directory (v2) or the memory and pids
    directories (v1); ``shell`` is the sh that enters them."""

    kind: CgroupKind
    memory_dir: str
    pids_dir: str
    shell: str

    @property
    def directories(self) -> tuple[str, ...]:
        if self.memory_dir == self.pids_dir:
            return (self.memory_dir,)
        return (self.memory_dir, self.pids_dir)


@dataclass(frozen=True, slots=True)
class CgroupUsage:
    """What the command's cgroup saw: the OOM killer, refused forks."""

    oom_killed: bool
    tasks_refused: bool


def find_cgroup_host(
    parent: str | None, *, shell: str | None, memory_bytes: int, max_tasks: int
) -> CgroupHost | str:
    """The host's cgroup for per-command groups, or why there is none (a reason to log).

    A candidate is used only after a trial child was created, given both limits and removed.
    """
    if shell is None:
        return "no sh to enter a cgroup with"
    reasons = []
    candidates = [_v2_host(parent, shell)] if parent else [_v2_host(None, shell), _v1_host(shell)]
    for candidate in candidates:
        if isinstance(candidate, str):
            reasons.append(candidate)
            continue
        failure = _trial(candidate, memory_bytes=memory_bytes, max_tasks=max_tasks)
        if not failure:
            return candidate
        reasons.append(f"{candidate.kind}: {failure}")
    return "; ".join(reasons)


class CommandCgroup:
    """One command's cgroup(s). ``create`` makes and limits them; ``entry_files`` is what the
    entering shell writes to; ``close`` kills what is left and removes them."""

    def __init__(self, host: CgroupHost, directories: tuple[str, ...]) -> None:
        self.host = host
        self.directories = directories

    @classmethod
    def create(
        cls, host: CgroupHost, token: str, *, memory_bytes: int, max_tasks: int
    ) -> CommandCgroup:
        """Raises OSError if a directory cannot be made or limited (it is removed again)."""
        made: list[str] = []
        try:
            for parent in host.directories:
                # The daemon's pid and start in the name tell whose a cgroup is (ps, and
                # remove_leftovers after the daemon died).
                path = os.path.join(parent, f"{_PREFIX}{_owner(os.getpid())}-{token}")
                os.mkdir(path)
                made.append(path)
            _limit(host, tuple(made), memory_bytes=memory_bytes, max_tasks=max_tasks)
        except OSError:
            for path in made:
                with contextlib.suppress(OSError):
                    os.rmdir(path)
            raise
        return cls(host, tuple(made))

    @property
    def memory_dir(self) -> str:
        return self.directories[0]

    @property
    def pids_dir(self) -> str:
        return self.directories[-1]

    def procs_files(self) -> list[str]:
        """Each directory's ``cgroup.procs``: the processes in it, to read."""
        return [os.path.join(path, "cgroup.procs") for path in self.directories]

    def entry_files(self) -> list[str]:
        """The files the entering shell writes ``0`` (itself) to: ``tasks`` on cgroup v1.

        A write to ``cgroup.procs`` moves a whole thread group, under the kernel's global
        ``cgroup_threadgroup_rwsem``, whose write side waits out an RCU grace period unless
        another move came just before: 3-6 ms of wall time per write, two per command on v1
        (memory and pids), most of it asleep (bench/exec_spawn.py, "exec true in bwrap: its
        cgroup costs": 8.4-17.3 ms p50 then, 0.5-4.3 ms now). A v1 ``tasks`` write of ``0``
        moves the writing thread alone and skips that lock; the shell has one thread, so that
        is the whole process, and everything it starts is born inside. cgroup v2 refuses a
        lone thread into a domain cgroup (EOPNOTSUPP), so it keeps ``cgroup.procs`` (its
        mount option ``favordynmods`` takes the wait away there: docs/exec-policy.md).
        """
        name = "tasks" if self.host.kind == "cgroup1" else "cgroup.procs"
        return [os.path.join(path, name) for path in self.directories]

    def enter_argv(self, limits: str = "") -> list[str]:
        """The argv prefix that moves the command into this cgroup before it starts, after
        running ``limits`` (``_limits.ulimit_script``) in the same shell."""
        return [self.host.shell, "-c", limits + ENTER_SCRIPT, "sh", *self.entry_files(), "--"]

    def usage(self) -> CgroupUsage:
        """What the reply's ``limit:memory`` and ``limit:processes`` are read from."""
        events = "memory.events" if self.host.kind == "cgroup2" else "memory.oom_control"
        memory = _keyed(os.path.join(self.memory_dir, events))
        pids = _keyed(os.path.join(self.pids_dir, "pids.events"))
        return CgroupUsage(
            oom_killed=memory.get("oom_kill", 0) > 0, tasks_refused=pids.get("max", 0) > 0
        )

    def cpu_ms(self) -> int | None:
        """The CPU time its processes used so far (cgroup v2's ``cpu.stat``); None on v1."""
        if self.host.kind != "cgroup2":
            return None
        usec = _keyed(os.path.join(self.memory_dir, "cpu.stat")).get("usage_usec")
        return None if usec is None else usec // 1000

    def kill(self) -> None:
        """SIGKILL every process left in the cgroup (v2: ``cgroup.kill``; v1: one by one)."""
        kill_file = os.path.join(self.memory_dir, "cgroup.kill")
        if self.host.kind == "cgroup2" and os.path.exists(kill_file):
            with contextlib.suppress(OSError):
                _write(kill_file, "1")
            return
        for _ in range(5):  # a task forking while it is killed: the next round takes the child
            pids = {pid for path in self.procs_files() for pid in _pids(path)}
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    async def close(self) -> None:
        """Remove the directories, killing what is left in them (retrying while tasks exit).

        The first removal is tried before any kill: after a command the runner has killed
        the cgroup's tasks already (``_runner._supervise``), and a directory that still
        holds a task refuses ``rmdir`` (EBUSY), so nothing escapes being killed below. A
        second kill up front read ``cgroup.procs`` again for nothing (with the unused memory
        high mark ``usage`` read, 0.93 -> 0.56-0.74 ms p50 on cgroup v1 at load 10:
        bench/exec_spawn.py, "daemon: cgroup made+read+removed").
        """
        left = list(self.directories)
        pause_s = 0.001  # doubling to 64 ms: a killed task is usually gone within a few ms
        for _ in range(_REMOVE_ROUNDS):
            for path in list(left):
                try:
                    os.rmdir(path)
                except FileNotFoundError:
                    pass  # gone already: another daemon's start-up cleared it
                except OSError:
                    continue
                left.remove(path)
            if not left:
                return
            self.kill()
            await trio.sleep(pause_s)
            pause_s = min(pause_s * 2, 0.064)
        log.warning("exec cgroup not removed (tasks still exiting): %s", ", ".join(left))


async def remove_leftovers(host: CgroupHost) -> list[str]:
    """Remove the per-command cgroups of daemons that are gone, killing what still runs in
    them first, as the runner's clear-up does; returns the names removed. A live daemon's groups
    (its pid runs, and started when the name says) are never touched. A group that will not
    go (a task that outlives its kill, a child cgroup inside) is left, logged once."""
    stale: dict[str, list[str]] = {}
    for parent in host.directories:
        with contextlib.suppress(OSError):
            for entry in os.scandir(parent):
                owner = _OWNER.fullmatch(entry.name)
                if owner and entry.is_dir(follow_symlinks=False) and not _alive(*owner.groups()):
                    stale.setdefault(entry.name, []).append(entry.path)
    async with trio.open_nursery() as nursery:  # each waits out its own tasks' exit
        for paths in stale.values():
            group = CommandCgroup(host, tuple(paths))
            group.kill()
            nursery.start_soon(group.close)
    gone = sorted(name for name, paths in stale.items() if not any(map(os.path.isdir, paths)))
    if gone:
        log.info("exec: cleared %d cgroups of daemons gone: %s", len(gone), ", ".join(gone))
    return gone


def _alive(pid: str, start: str | None) -> bool:
    """Whether the daemon a group's name gives still runs: its pid does, and (when the name
    says) started then. Without a start in the name a running pid counts as alive."""
    now = _start_ticks(int(pid))
    return now is not None and start in (None, now)


@cache
def _owner(pid: int) -> str:
    """``<pid>-s<start>`` for a group's name; the pid alone if /proc cannot say its start."""
    start = _start_ticks(pid)
    return str(pid) if start is None else f"{pid}-s{start}"


def _start_ticks(pid: int) -> str | None:
    """When ``pid`` started, in clock ticks after boot (``/proc/<pid>/stat``, field 22);
    None when no such process runs."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # After the last ")": the command name may hold spaces and parentheses.
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _limit(host: CgroupHost, paths: tuple[str, ...], *, memory_bytes: int, max_tasks: int) -> None:
    memory, pids = paths[0], paths[-1]
    if host.kind == "cgroup2":
        _write(os.path.join(memory, "memory.max"), str(memory_bytes))
        _write_if_present(os.path.join(memory, "memory.swap.max"), "0")
        _write_if_present(os.path.join(memory, "memory.oom.group"), "1")
    else:
        _write(os.path.join(memory, "memory.limit_in_bytes"), str(memory_bytes))
        _write_if_present(os.path.join(memory, "memory.memsw.limit_in_bytes"), str(memory_bytes))
    _write(os.path.join(pids, "pids.max"), str(max_tasks))


def _trial(host: CgroupHost, *, memory_bytes: int, max_tasks: int) -> str:
    token = f"probe-{os.getpid()}"
    try:
        group = CommandCgroup.create(host, token, memory_bytes=memory_bytes, max_tasks=max_tasks)
    except OSError as error:
        return f"{error.strerror or error} ({error.filename or host.memory_dir})"
    for path in group.directories:
        with contextlib.suppress(OSError):
            os.rmdir(path)
    return ""


def _v2_host(parent: str | None, shell: str) -> CgroupHost | str:
    if parent is None:
        own = _own_cgroups().get("")
        mount = _mounts().get("cgroup2")
        if own is None or mount is None:
            return "cgroup2: not mounted"
        parent = _join(mount, own)
    try:
        with open(os.path.join(parent, "cgroup.subtree_control")) as f:
            enabled = set(f.read().split())
        if not {"memory", "pids"} <= enabled:
            _write(os.path.join(parent, "cgroup.subtree_control"), "+memory +pids")
    except OSError as error:
        return f"cgroup2: memory and pids not delegated at {parent} ({error.strerror})"
    return CgroupHost("cgroup2", parent, parent, shell)


def _v1_host(shell: str) -> CgroupHost | str:
    own, mounts = _own_cgroups(), _mounts()
    dirs = {}
    for controller in ("memory", "pids"):
        if controller not in own or controller not in mounts:
            return f"cgroup1: no {controller} hierarchy"
        dirs[controller] = _join(mounts[controller], own[controller])
    return CgroupHost("cgroup1", dirs["memory"], dirs["pids"], shell)


def _own_cgroups() -> dict[str, str]:
    """Controller -> this process's cgroup path ("" is the v2 hierarchy)."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                found[name] = path
    return found


def _mounts() -> dict[str, tuple[str, str]]:
    """Controller ("cgroup2" for v2) -> (mount point, the mount's root in the hierarchy)."""
    found: dict[str, tuple[str, str]] = {}
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            dash = fields.index("-")
            fstype, options = fields[dash + 1], fields[dash + 3].split(",")
            root, point = fields[3], fields[4]
            if fstype == "cgroup2":
                found.setdefault("cgroup2", (point, root))
            elif fstype == "cgroup":
                for option in options:
                    found.setdefault(option, (point, root))
    return found


def _join(mount: tuple[str, str], path: str) -> str:
    point, root = mount
    relative = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
    return os.path.normpath(os.path.join(point, relative))


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _write_if_present(path: str, value: str) -> None:
    if os.path.exists(path):
        _write(path, value)


def _keyed(path: str) -> dict[str, int]:
    found = {}
    with contextlib.suppress(OSError), open(path) as f:
        for line in f:
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                found[key] = int(value)
    return found


def _pids(path: str) -> list[int]:
    try:
        with open(path) as f:
            return [int(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []
