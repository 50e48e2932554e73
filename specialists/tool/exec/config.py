"""The exec engine's settings: one frozen dataclass, units in the names, defaults with a source.

It is ``exec`` in the tool specialist's own section (``tool.exec``, specialists/tool/config.py),
loaded strictly like the rest; it declares its programs (``ReadsInputs``), its workspace roots
(``OpensWorkspaces``) and checks them against the daemon's own paths (``ChecksConfig``).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from csp_web.config import daemon_paths

from ._destinations import Destination, check_rule_env, parse_destinations

if TYPE_CHECKING:
    from csp_web.config import Config

MIB = 1024 * 1024

# Environment names the engine owns or that make an allowed program load foreign code: a
# request may never set them, whatever ``env_allowed`` says. LD_PRELOAD turns an allowed ``ls``
# into arbitrary code, which would make the argv allow-list meaningless.
ENGINE_ENV = frozenset({"PATH", "HOME", "TMPDIR", "CSP_EXEC_ID"})
# Each makes an interpreter or the C library load a file the request names: module search
# paths (PYTHONPATH, NODE_PATH, PERL5LIB, RUBYLIB), option strings that take code or libraries
# (RUBYOPT, JAVA_TOOL_OPTIONS), glibc's iconv modules (GCONV_PATH) and tunables, and the
# shell hooks bash runs on its own (PROMPT_COMMAND, PS4 with xtrace, SHELLOPTS).
_CODE_LOADING_ENV = frozenset(
    {
        *("BASH_ENV", "ENV", "NODE_OPTIONS", "PYTHONSTARTUP", "PERL5OPT", "PYTHONPATH"),
        *("PYTHONHOME", "PYTHONBREAKPOINT", "NODE_PATH", "PERL5LIB", "PERLLIB", "RUBYOPT"),
        *("RUBYLIB", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "GCONV_PATH"),
        *("GLIBC_TUNABLES", "PROMPT_COMMAND", "PS4", "SHELLOPTS", "BASHOPTS"),
    }
)
_CODE_LOADING_PREFIXES = ("LD_", "GIT_", "DYLD_")


def env_refused(name: str) -> bool:
    """Whether ``name`` is one no request or program rule may set: the engine's own, or one
    that makes a program load code (``_CODE_LOADING_ENV``, ``LD_*``, ``GIT_*``, ``DYLD_*``)."""
    return (
        name in ENGINE_ENV or name in _CODE_LOADING_ENV or name.startswith(_CODE_LOADING_PREFIXES)
    )


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled; ValueError naming it if it does not compile (re.error is not one)."""
    try:
        return re.compile(pattern)
    except re.error as error:
        raise ValueError(f"bad regex {pattern!r}: {error}") from None


@dataclass(frozen=True, slots=True)
class ProgramRule:
    """One program the policy lets run, and what its arguments may be.

    ``program`` is a bare name (matched only when found on the search path) or an absolute
    path (matched against the path as written and its realpath). When ``args_match`` is set,
    every argument must fullmatch it; an argument in which any ``deny_args`` regex is found
    refuses the command. Raises ValueError for an empty name or a regex that does not compile.
    """

    program: str
    args_match: str | None = None
    deny_args: tuple[str, ...] = ()
    # Where the program may connect, through its own lane of the guard proxy (_network.py,
    # docs/exec-policy.md): "host" or "host:port" (443). Empty: no network, as any command.
    network: tuple[str, ...] = ()
    # Variables the program always gets (NODE_EXTRA_CA_CERTS, npm_config_registry), over the
    # request's ENV; never the engine's own, a proxy variable or one that loads code.
    env: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not self.program or (os.sep in self.program and not os.path.isabs(self.program)):
            raise ValueError(f"program must be a bare name or an absolute path: {self.program!r}")
        for pattern in (self.args_match, *self.deny_args):
            if pattern is not None:
                compile_pattern(pattern)
        parse_destinations(self.network)
        check_rule_env(self.env, env_refused)
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))

    @property
    def destinations(self) -> tuple[Destination, ...]:
        """``network`` parsed (checked when the rule was made)."""
        return parse_destinations(self.network)


# A starting point that can look at a workspace and nothing more; deployments list their
# toolchain (npm, pytest, git with deny_args...). No interpreter or exec wrapper is here: any
# of them would allow whatever the sandbox allows.
# fmt: off
DEFAULT_ALLOWED = (
    *(ProgramRule(name) for name in [
        "true", "false", "echo", "printf", "pwd", "ls", "cat", "head", "tail", "wc", "grep",
        "uniq", "cut", "tr", "diff", "date", "uname", "basename", "dirname",
    ]),
    # GNU sort runs --compress-program=PROG, and getopt takes any unambiguous prefix of a
    # long option (--co=sh), hence the prefix rule rather than the full name.
    ProgramRule("sort", deny_args=(r"^--co",)),
)

# Shells, exec wrappers and privilege tools: each runs an arbitrary program given as an
# argument, so allowing one by mistake would void the allow-list. Deny wins over allow.
DEFAULT_DENIED = frozenset({
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "csh", "tcsh", "busybox", "env",
    "xargs", "nohup", "setsid", "nice", "ionice", "timeout", "stdbuf", "chrt", "taskset",
    "flock", "watch", "script", "expect", "strace", "ltrace", "gdb", "sudo", "su", "doas",
    "pkexec", "setpriv", "nsenter", "unshare", "chroot", "bwrap", "prlimit", "capsh", "runuser",
})

DEFAULT_ENV_ALLOWED = frozenset({
    "CI", "TZ", "LANG", "LC_ALL", "TERM", "NO_COLOR", "FORCE_COLOR", "NODE_ENV",
    "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
})

# Host paths a command may never change or create, even inside its working directory: the
# daemon user's shell start-up files (each runs on the next login: ~/.bashrc was appended to in
# issue 22), its keys, its per-user configuration (the daemon's own config.yaml, systemd user
# units, git's global config) and ~/.local/bin, early on Debian's login PATH. The precedent is
# Codex's protected paths inside writable roots. ``~`` is the daemon user's home on the host.
# A trailing slash names a directory: a missing one is held absent by an empty directory, a
# missing file by an empty file. .git is left writable on purpose (git init, clone, hooks).
DEFAULT_PROTECTED = (
    "~/.bashrc", "~/.bash_profile", "~/.bash_login", "~/.bash_logout", "~/.profile",
    "~/.zshrc", "~/.zshenv", "~/.zprofile", "~/.zlogin", "~/.zlogout", "~/.kshrc",
    "~/.mkshrc", "~/.cshrc", "~/.tcshrc", "~/.login", "~/.logout", "~/.inputrc",
    "~/.ssh/", "~/.gnupg/", "~/.config/", "~/.local/bin/",
)
# fmt: on

# The seed's DANGEROUS_PATTERNS, named. Two changes, both deliberate: the seed's
# /rm\s+-rf\s+\// refuses every absolute path (rm -rf /ws/build), so the slash must stand
# alone here; and curl|bash / wget|sh are widened to either fetcher into any common shell.
DANGEROUS_PATTERNS: tuple[tuple[str, str], ...] = (
    ("rm_rf_root", r"\brm\s+-rf\s+/(?:\*|\s|$)"),
    ("write_block_device", r">\s*/dev/sd"),
    ("curl_pipe_shell", r"\bcurl\b.*\|\s*(?:sudo\s+)?(?:ba|da|z)?sh\b"),
    ("wget_pipe_shell", r"\bwget\b.*\|\s*(?:sudo\s+)?(?:ba|da|z)?sh\b"),
)


@dataclass(frozen=True, slots=True)
class ExecConfig:
    """How commands are admitted, sandboxed and bounded. Raises ValueError when inconsistent."""

    # Working directories must resolve inside one of these (empty disables exec); with a root
    # daemon, owned by run_as_uid so that commands may write there.
    workspace_roots: tuple[str, ...] = ()
    default_timeout_ms: int = 30_000  # the tool seed: "Default timeout: 30s"
    max_timeout_ms: int = 600_000  # Claude Code's Bash tool caps one call at 10 minutes
    allowed_programs: tuple[ProgramRule, ...] = DEFAULT_ALLOWED
    denied_programs: frozenset[str] = DEFAULT_DENIED
    dangerous_patterns: tuple[tuple[str, str], ...] = DANGEROUS_PATTERNS
    allow_shell: bool = False  # the seed wants commands "sanitized"; a shell cannot be
    shell_program: str = "/bin/sh"
    search_path: str = "/usr/local/bin:/usr/bin:/bin"  # Debian's default user PATH
    env_allowed: frozenset[str] = DEFAULT_ENV_ALLOWED
    locale: str = "C.UTF-8"  # always present on Debian, unlike en_US.UTF-8
    # Used only when the daemon runs as root: nobody/nogroup, as NFS root squashing maps to.
    # The browser's upload PATH reads a workspace file only if they could (``runs_as``).
    run_as_uid: int = 65534
    run_as_gid: int = 65534
    bwrap_program: str | None = "bwrap"  # None runs without the sandbox (tests, non-Linux)
    require_bwrap: bool = False
    # Hidden inside the sandbox; the lead adds the daemon's socket and state directories.
    # /run holds host Unix sockets (D-Bus, docker, databases) that a network namespace does
    # not cover: a command must not connect() to them.
    masked_paths: tuple[str, ...] = ("/run", "/var/run", "/root", "/home")
    # Read-only (or held absent) wherever a working directory contains them; the lead adds
    # every file the daemon reads as configuration or runs (csp_web.config.daemon_inputs).
    protected_paths: tuple[str, ...] = DEFAULT_PROTECTED
    tmp_size_bytes: int = 64 * MIB  # Docker's default /dev/shm size for a private tmpfs
    # The tool seed: "Max memory: 512MB per process". With a cgroup (below) it bounds the
    # command's total memory, tmpfs included; without one it is each process's RLIMIT_AS.
    max_memory_bytes: int = 512 * MIB
    # The tool seed: "Max processes: 10 concurrent". With a cgroup, the command's pids.max;
    # without one, RLIMIT_NPROC. Both count threads too, and under bwrap the sandbox's init
    # and GNU time: node (about 11 threads) will not start under 10, so a policy running it
    # raises this (docs/exec-policy.md).
    max_processes: int = 10
    # "auto": a cgroup per command (memory and pids) where the host delegates one, else the
    # rlimits; "off": always the rlimits. The reply's LIMITS field and stats say which applied.
    cgroup: Literal["auto", "off"] = "auto"
    cgroup_parent: str | None = None  # a delegated cgroup v2 directory; None: find one
    max_file_bytes: int = 64 * MIB  # no file larger than the scratch /tmp may hold
    max_open_files: int = 1024  # Linux's default soft RLIMIT_NOFILE
    cpu_cores: int = 1  # the tool seed: "Max CPU: 100% (1 core)"
    max_output_bytes: int = MIB  # per stream; Codex CLI's DEFAULT_OUTPUT_BYTES_CAP
    output_tail_bytes: int = 4096  # of those, kept from the end: errors come last
    summary_max_chars: int = 500  # the tool seed: "Max stdout/stderr summary: 500 chars"
    drain_grace_ms: int = 2_000  # Codex CLI's IO_DRAIN_TIMEOUT_MS after the child exits
    reap_grace_ms: int = 5_000  # a SIGKILLed tree is gone in ms; this only bounds D-state
    cache_ttl_s: int = 60  # the tool seed: "TTL: 60s for safe reads"
    cache_safe_patterns: tuple[str, ...] = ()  # the seed: caching is opt-in
    # Connections open at once on one command's network lane (a rule with ``network``); one
    # more is refused. npm keeps at most 15 sockets (its ``maxsockets``), pip's pool 10.
    network_max_connections: int = 32

    def __post_init__(self) -> None:
        _check_positive(self)
        _check_paths(self)
        _check_env(self.env_allowed)
        for _, pattern in self.dangerous_patterns:
            compile_pattern(pattern)
        for pattern in self.cache_safe_patterns:
            compile_pattern(pattern)

    def input_paths(self) -> tuple[str, ...]:
        """The shell and bwrap it runs, as the daemon's PATH finds a bare name
        (``csp_web.config.ReadsInputs``): no command may replace them."""
        bwrap = None if self.bwrap_program is None else _program(self.bwrap_program)
        return tuple(path for path in (self.shell_program, bwrap) if path)

    def workspaces(self) -> tuple[str, ...]:
        """Its workspace roots (``csp_web.config.OpensWorkspaces``)."""
        return self.workspace_roots

    def masked(self) -> tuple[str, ...]:
        """Its masked paths (``csp_web.config.MasksPaths``): the browser's upload refuses
        them as a command cannot see them."""
        return self.masked_paths

    def runs_as(self) -> tuple[int, int]:
        """Its sandbox uid and gid (``csp_web.config.RunsWorkAs``): a root daemon's browser
        upload reads only what a command running as them could."""
        return self.run_as_uid, self.run_as_gid

    def check_config(self, config: Config) -> None:
        """ValueError for a workspace root among the daemon's own paths
        (``csp_web.config.ChecksConfig``; ``refuse_private_workspaces``)."""
        refuse_private_workspaces(self.workspace_roots, daemon_paths(config))


def _program(name: str) -> str | None:
    """Where the daemon's PATH finds ``name`` (a path is kept as it is); None if nowhere."""
    if not name or os.sep in name:
        return name or None
    return shutil.which(name)


def _check_positive(config: ExecConfig) -> None:
    sizes = {
        "default_timeout_ms": config.default_timeout_ms,
        "tmp_size_bytes": config.tmp_size_bytes,
        "max_memory_bytes": config.max_memory_bytes,
        "max_processes": config.max_processes,
        "max_file_bytes": config.max_file_bytes,
        "max_open_files": config.max_open_files,
        "cpu_cores": config.cpu_cores,
        "summary_max_chars": config.summary_max_chars,
        "output_tail_bytes": config.output_tail_bytes,
        "drain_grace_ms": config.drain_grace_ms,
        "reap_grace_ms": config.reap_grace_ms,
        "network_max_connections": config.network_max_connections,
        "run_as_uid": config.run_as_uid,  # uid 0 would undo the point of switching
        "run_as_gid": config.run_as_gid,
    }
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"{name} must be positive")
    if not config.default_timeout_ms <= config.max_timeout_ms:
        raise ValueError("default_timeout_ms cannot exceed max_timeout_ms")
    if config.output_tail_bytes >= config.max_output_bytes:
        raise ValueError("output_tail_bytes must be smaller than max_output_bytes")
    if config.summary_max_chars < 16:
        raise ValueError("summary_max_chars must leave room for a head and a tail")


def _check_paths(config: ExecConfig) -> None:
    paths = (*config.workspace_roots, *config.masked_paths, config.shell_program)
    for path in (*paths, *filter(None, [config.cgroup_parent])):
        if not os.path.isabs(path):
            raise ValueError(f"path must be absolute: {path!r}")
    for path in config.protected_paths:
        if not (os.path.isabs(path) or path.startswith("~/")) or "\0" in path:
            raise ValueError(f"protected_paths: {path!r} must be absolute or start with ~/")
    if any(os.path.realpath(root) == "/" for root in config.workspace_roots):
        raise ValueError("a workspace root of / would make the whole filesystem writable")
    for directory in filter(None, config.search_path.split(os.pathsep)):
        for root in config.workspace_roots:
            real, real_root = os.path.realpath(directory), os.path.realpath(root)
            if real == real_root or real.startswith(real_root.rstrip("/") + "/"):
                # A program found there is one a request may have written: the allow-list
                # names programs, so it would allow whatever carries an allowed name.
                raise ValueError(f"search_path: {directory} lies in workspace root {root}")


def _check_env(names: frozenset[str]) -> None:
    for name in names:
        if env_refused(name):
            raise ValueError(
                f"env_allowed may not list {name}: the engine owns it or it loads code"
            )


def refuse_private_workspaces(roots: Iterable[str], private: Iterable[str]) -> None:
    """ValueError for a workspace root that is, contains or lies inside one of the daemon's
    own paths (state, sockets, outbox, cache, cron): a working directory there would show
    the daemon's files to commands, or let them write into them."""
    private = [os.path.realpath(path) for path in private]
    for root in roots:
        real = os.path.realpath(root)
        for path in private:
            if overlaps(real, path):
                raise ValueError(
                    f"tool.exec.workspace_roots: {root} overlaps the daemon's own {path}"
                )


def overlaps(a: str, b: str) -> bool:
    """True when one of two real paths is the other or lies inside it."""
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")
