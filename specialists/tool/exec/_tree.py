"""Finding and killing what a command left running, by walking /proc.

Under bwrap this is a second line: SIGKILL to bwrap kills the PID namespace's init and the
kernel kills everything in the namespace. Without bwrap it is the only line, and it cannot
promise everything. It finds processes two ways: by parent (PPid) from the command, which
works while the tree is intact, as at a timeout; and by the ``CSP_EXEC_ID`` token the engine
puts in the command's environment, which survives setsid and re-parenting to init. A process
that both left the tree (its parent exited) and dropped the token (``env -i``, execve with a
fresh environment) is not found; only a cgroup (``cgroup.kill``) or a child subreaper would
find it (a subreaper would change what every other part of the daemon sees when it waits for
children). Where the command's own cgroup holds it, the runner kills the cgroup instead of
walking /proc (``_runner._swept``).

Each kill goes through a pidfd opened *after* the process was found and re-checked against
the same test, so a pid reused in between is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal

TOKEN_ENV = "CSP_EXEC_ID"
_ROUNDS = 5  # each round kills what the last missed; a fork bomb under RLIMIT_NPROC ends fast


def kill_tree(root: int, *, token: str | None) -> None:
    """SIGKILL ``root``'s live descendants and every process carrying ``token``, until a
    scan finds none (at most a few rounds). ``root`` itself is the caller's to kill."""
    owner = _owner(root)  # the sandbox uid: only its processes can carry the token
    for _ in range(_ROUNDS):
        parents = _parents()
        targets = _descendants(root, parents) | _tagged(token, parents, owner)
        if not targets:
            return
        _kill_pinned(targets, family=targets | {root}, token=token)


def _kill_pinned(targets: set[int], *, family: set[int], token: str | None) -> None:
    """Pin every target with a pidfd, re-check each (its parent still in ``family``, or the
    token still in its environment) while none is dead yet, then kill the ones that pass."""
    pinned: dict[int, int] = {}
    try:
        for pid in targets:
            with contextlib.suppress(OSError):
                pinned[pid] = os.pidfd_open(pid)
        confirmed = [fd for pid, fd in pinned.items() if _still_ours(pid, family, token)]
        for fd in confirmed:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
    finally:
        for fd in pinned.values():
            os.close(fd)


def tree_cpu_ms(root: int) -> int:
    """The CPU time (user + system, ms) of ``root`` and its live descendants, with what each
    counts of the children it reaped: a command's CPU so far, read from /proc."""
    pids = {root} | _descendants(root, _parents())
    ticks = sum(_cpu_ticks(pid) for pid in pids)
    return ticks * 1000 // os.sysconf("SC_CLK_TCK")


def _cpu_ticks(pid: int) -> int:
    """utime + stime + cutime + cstime of ``pid`` (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return 0
    return sum(int(field) for field in fields[11:15])


def _parents() -> dict[int, int]:
    """pid -> PPid of every live (not zombie) process in /proc."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None and stat[0] != "Z":
                table[int(name)] = stat[1]
    return table


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, PPid) from /proc/<pid>/stat, whose comm field may hold spaces and parens."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0].decode(), int(fields[1])


def _descendants(root: int, parents: dict[int, int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _tagged(token: str | None, parents: dict[int, int], owner: int | None) -> set[int]:
    if token is None:
        return set()
    mine = (pid for pid in parents if owner is None or _owner(pid) == owner)
    return {pid for pid in mine if _has_token(pid, token)}


def _owner(pid: int) -> int | None:
    """The uid owning /proc/<pid> (its real uid once it has exec'd), or None if gone."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _has_token(pid: int, token: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return False
    return f"{TOKEN_ENV}={token}".encode() in entries


def _still_ours(pid: int, family: set[int], token: str | None) -> bool:
    stat = _stat(pid)
    if stat is not None and stat[1] in family:
        return True
    return token is not None and _has_token(pid, token)
