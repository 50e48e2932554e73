"""Resource limits, applied by util-linux ``prlimit`` just before the command's own exec, or
by the shell that moves the command into its cgroup (``ulimit``), which runs first anyway.

Either sets the limits on itself and then execs the rest, so no Python runs between fork and
exec: ``preexec_fn`` is unsafe in a daemon with threads (CPython's subprocess docs), and the
limits must be in place before the first instruction of the command. The shell saves
prlimit's exec: 0.9 ms of CPU and about 4 ms of wall time per command on a loaded 2-core host
(bench/exec_spawn.py, "exec: prlimit"). Set there, the limits also bound setpriv and bwrap,
which stay far below each of them; RLIMIT_NPROC, the one that would not (it sizes the user
namespace bwrap makes), is only ever set by prlimit inside the sandbox.

When the command has its own cgroup (_cgroup.py), memory and tasks are bounded there and only
the per-process limits below stay. Without one:

RLIMIT_NPROC counts the processes of the *real uid*, not of the command, and never applies to
root (the kernel exempts uid 0 and holders of CAP_SYS_RESOURCE). So it only means something
once the command runs as an unprivileged uid, and it is per command only under bwrap, where
prlimit runs inside the sandbox's fresh user namespace and the kernel counts per namespace
(the sandbox's own init included). Without bwrap every command that runs as the same uid
shares one budget, and a switch to a uid already over it makes the exec fail with EAGAIN; so
that budget is ``max_processes`` times the commands that may run at once (``Sandbox.nproc``).
"""

from __future__ import annotations

from specialists.tool.exec.config import ExecConfig


def cpu_seconds(timeout_ms: int, cores: int) -> int:
    """RLIMIT_CPU's soft limit: the CPU time ``cores`` busy cores spend in the timeout,
    rounded up to whole seconds (the unit of the limit)."""
    return -(-timeout_ms * cores // 1000)


# POSIX sh's ``ulimit -f`` counts 512-byte blocks (dash, bash as sh and busybox alike).
_ULIMIT_BLOCK = 512


def ulimit_script(config: ExecConfig, *, timeout_ms: int) -> str | None:
    """The limits of ``prlimit_argv`` with ``nproc`` None (a cgroup bounds memory and tasks)
    as shell commands that end the shell (exit 125, as a refused cgroup write) if one fails;
    to run before the cgroup's entering script. None when ``max_file_bytes`` is not a whole
    number of 512-byte blocks, which ``ulimit -f`` cannot say: prlimit keeps it exact then.
    The soft CPU limit goes first: a hard one below the (unlimited) soft one is refused.
    """
    if config.max_file_bytes % _ULIMIT_BLOCK:
        return None
    cpu = cpu_seconds(timeout_ms, config.cpu_cores)
    limits = [
        f"-f {config.max_file_bytes // _ULIMIT_BLOCK}",
        f"-n {config.max_open_files}",
        "-c 0",
        f"-S -t {cpu}",
        f"-H -t {cpu + 1}",
    ]
    return " && ".join(f"ulimit {limit}" for limit in limits) + " || exit 125; "


def prlimit_argv(
    prlimit: str, config: ExecConfig, *, timeout_ms: int, nproc: int | None
) -> list[str]:
    """``prlimit`` with every limit, up to and including its ``--``.

    The CPU hard limit is one second above the soft one: the soft limit sends SIGXCPU, which
    names the limit in the result; the hard one SIGKILLs a command that ignores it.

    ``nproc`` None means the command runs in its own cgroup, whose ``memory.max`` and
    ``pids.max`` bound memory and tasks: RLIMIT_AS and RLIMIT_NPROC are then left out.
    Otherwise RLIMIT_AS stands in for the seed's 512 MB: it bounds each process's address
    space, not the command's memory, and a runtime that reserves much more than it touches
    (V8, the JVM) fails to start under it; RLIMIT_NPROC gets ``nproc``.
    """
    cpu = cpu_seconds(timeout_ms, config.cpu_cores)
    memory = [] if nproc is None else [f"--as={config.max_memory_bytes}", f"--nproc={nproc}"]
    return [
        prlimit,
        *memory,
        f"--fsize={config.max_file_bytes}",
        f"--nofile={config.max_open_files}",
        f"--cpu={cpu}:{cpu + 1}",
        "--core=0",  # a SIGXCPU core dump would land in the workspace
        "--",
    ]
