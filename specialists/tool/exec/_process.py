"""Spawning a wrapped command and owning its process until it is reaped.

``subprocess.Popen`` runs on a spawner thread (``_spawner``: one that lives as long as the
daemon, as bwrap's ``--die-with-parent`` needs) and a pidfd is waited on, as inside
``trio.lowlevel.open_process``; the engine owns the reap itself so that it can kill the tree
at the right moment (after exit, before the reap, while the zombie still pins the pid and
the process group). Popen is kept over ``os.posix_spawn`` for ``close_fds``: posix_spawn in
Python 3.11 cannot close descriptors a C library left inheritable. No ``preexec_fn`` (unsafe
with threads): limits and the uid switch are separate programs in argv.

CPU time and peak RSS do not come from ``wait4`` here: bwrap's monitor exits as soon as the
namespace's init reports the command's status over an eventfd, without reaping that init, so
its rusage holds none of the sandbox's work; and a vfork'd child's ``ru_maxrss`` starts from
the daemon's own high-water RSS. GNU time inside the chain reports them over a fourth pipe;
it costs 1.0-1.3 ms of CPU per command (bench/exec_spawn.py, "exec: GNU time"), kept for the
reply's CPU_MS and PEAK_RSS_KIB, which the cgroup's figures would not match (its memory high
mark counts page cache and tmpfs, and v1 keeps CPU in another hierarchy).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass
from functools import partial

import trio

from ._spawner import run_in_spawner
from ._tree import kill_tree


@dataclass(frozen=True, slots=True)
class Exit:
    """How the process ended: its raw wait status."""

    status: int


class Pipes:
    """The (read, write) ends of the output pipes and of the rusage report pipe.

    GNU time reopens the report pipe by ``/dev/fd/N`` after the uid switch, and a pipe's inode
    is mode 0600 for its creator (root), so the write end is opened up to others (0622);
    only a process that can already reach the descriptor in /proc can use that.
    """

    def __init__(self, *, pass_report: bool) -> None:
        self.stdout = os.pipe()
        self.stderr = os.pipe()
        self.report = os.pipe()
        self.pass_report = pass_report
        os.fchmod(self.report[1], 0o622)

    @property
    def report_fd(self) -> int:
        return self.report[1]

    def close_write_ends(self) -> None:
        for _, write in (self.stdout, self.stderr, self.report):
            os.close(write)

    def close_read_ends(self) -> None:
        for read, _ in (self.stdout, self.stderr, self.report):
            os.close(read)


class Child:
    """A spawned command: its pid (which is also its process group, from ``setsid``), a
    pidfd, the read ends of its pipes, and the token its environment carries (without bwrap).
    ``aclose`` releases all of them."""

    def __init__(self, popen: subprocess.Popen[bytes], pipes: Pipes, token: str | None) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.token = token
        self._pidfd = os.pidfd_open(self.pid)
        self.stdout = trio.lowlevel.FdStream(pipes.stdout[0])
        self.stderr = trio.lowlevel.FdStream(pipes.stderr[0])
        self.report = trio.lowlevel.FdStream(pipes.report[0])
        self.exit: Exit | None = None

    async def wait_exited(self) -> None:
        """Return once the process has exited (it stays unreaped, holding its pid)."""
        await trio.lowlevel.wait_readable(self._pidfd)

    async def kill_tree(self) -> None:
        """SIGKILL the process, its process group, and (walking /proc in a thread) its
        descendants and whatever carries the token. Safe after exit: until the reap, the
        zombie keeps the pid and process group from being reused."""
        if self.exit is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        await trio.to_thread.run_sync(partial(kill_tree, self.pid, token=self.token))
        self.kill_group()

    def kill_group(self) -> None:
        """SIGKILL what is still in the process group (not what left it with setsid)."""
        if self.exit is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)

    async def reap(self, *, grace_s: float) -> Exit | None:
        """Wait up to ``grace_s`` for exit, then reap; None if the process outlived the grace
        (a task in uninterruptible sleep), in which case a system task reaps it later."""
        if self.exit is None:
            with trio.move_on_after(grace_s):
                await self.wait_exited()
                self._reap_now()
        return self.exit

    async def aclose(self, *, grace_s: float) -> None:
        """Kill whatever is left, reap (or hand the reap on), close the pipes and the pidfd."""
        with trio.CancelScope(shield=True):
            await self.kill_tree()
            if await self.reap(grace_s=grace_s) is None:
                trio.lowlevel.spawn_system_task(self._reap_later)
            for stream in (self.stdout, self.stderr, self.report):
                await stream.aclose()

    def _reap_now(self) -> None:
        _, status = os.waitpid(self.pid, 0)
        self.exit = Exit(status)
        # Popen warns from __del__ about a child it believes still runs.
        self._popen.returncode = os.waitstatus_to_exitcode(status)
        trio.lowlevel.notify_closing(self._pidfd)
        os.close(self._pidfd)

    async def _reap_later(self) -> None:
        await self.wait_exited()
        self._reap_now()


async def spawn_child(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: str,
    pipes: Pipes,
    token: str | None,
    cwd_fd: int | None = None,
) -> Child:
    """Start ``argv`` in a new session, stdin from /dev/null, output into ``pipes``.

    ``token`` is the value of the environment's ``CSP_EXEC_ID`` (None under bwrap), by which
    ``kill_tree`` finds descendants that left the process tree.

    Takes ownership of ``pipes``: the write ends are closed here, the read ends belong to the
    returned Child, which the caller must ``aclose``. Raises OSError as Popen does when the
    first program in ``argv`` cannot be executed (the read ends are closed then too).
    With ``cwd_fd`` the child enters that open directory (through /proc/self/fd), not a path
    that could have been swapped since it was checked.
    """
    if cwd_fd is not None:
        cwd = f"/proc/self/fd/{cwd_fd}"
    try:
        popen = await run_in_spawner(partial(_popen, argv, env, cwd, pipes, cwd_fd))
    except BaseException:
        pipes.close_read_ends()
        raise
    finally:
        pipes.close_write_ends()
    return Child(popen, pipes, token)


def _popen(
    argv: list[str], env: dict[str, str], cwd: str, pipes: Pipes, cwd_fd: int | None
) -> subprocess.Popen[bytes]:
    passed = (pipes.report_fd,) if pipes.pass_report else ()
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=pipes.stdout[1],
        stderr=pipes.stderr[1],
        pass_fds=passed if cwd_fd is None else (*passed, cwd_fd),
        env=env,
        cwd=cwd,
        close_fds=True,
        start_new_session=True,  # its own process group and session, for killpg
    )
