"""The exec request and the checks on its fields that need no policy: bounds, names, paths."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from specialists.tool.exec.config import ExecConfig

from ._access import RunAs, may_search
from ._errors import blocked, denied, invalid, too_long, unavailable

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The most execve takes in one argument or NAME=value string, its NUL included: the kernel's
# MAX_ARG_STRLEN, 32 pages (include/uapi/linux/binfmts.h); one byte more is E2BIG.
MAX_ARG_STRLEN = 32 * os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True, slots=True)
class ExecRequest:
    """One command as the exec op receives it.

    ``timeout_ms`` None takes the configured default; ``working_dir`` None takes the first
    workspace root; ``env`` adds variables on top of the engine's own (PATH, HOME, TMPDIR,
    LANG); ``shell`` asks for ``/bin/sh -c`` and is refused unless the config allows it.
    """

    command: str
    timeout_ms: int | None = None
    working_dir: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    shell: bool = False


def check_command(command: str) -> None:
    """Raise INVALID_FIELD for an empty command or one holding NUL (execve cannot carry it)."""
    if not command.strip() or "\0" in command:
        raise invalid("COMMAND")


def check_timeout(timeout_ms: int | None, config: ExecConfig) -> int:
    """The timeout to use; INVALID_FIELD outside 1..max_timeout_ms.

    An over-long timeout is refused rather than clamped: an agent that asked for 20 minutes
    should learn it will not get them before the command starts, not from a kill at 10.
    """
    if timeout_ms is None:
        return config.default_timeout_ms
    if isinstance(timeout_ms, bool) or not 1 <= timeout_ms <= config.max_timeout_ms:
        raise invalid("TIMEOUT_MS")
    return timeout_ms


def check_env(env: Mapping[str, str], config: ExecConfig) -> dict[str, str]:
    """The requested additions, each name well-formed and on the allow-list.

    A malformed name or a value with NUL is INVALID_FIELD (the request is wrong); a good name
    the allow-list lacks is COMMAND_BLOCKED naming it (the request is fine, the policy says no),
    so an agent can tell "fix the field" from "ask the operator". A ``NAME=value`` past
    ``MAX_ARG_STRLEN`` is INVALID_FIELD naming it, before anything is spawned.
    """
    for name, value in env.items():
        if not _ENV_NAME.fullmatch(name) or "\0" in value:
            raise invalid("ENV")
        if name not in config.env_allowed:
            raise blocked(name)
        if not fits_execve(f"{name}={value}"):
            raise too_long(f"ENV {name}", f"{MAX_ARG_STRLEN} bytes")
    return dict(env)


def fits_execve(text: str) -> bool:
    """Whether execve takes ``text`` as one string: at most ``MAX_ARG_STRLEN`` bytes with its
    NUL, encoded as Popen encodes it (``os.fsencode``). Text short enough in characters
    (4 bytes each at most) is not encoded."""
    if 4 * len(text) < MAX_ARG_STRLEN:
        return True
    return len(os.fsencode(text)) < MAX_ARG_STRLEN


def resolve_working_dir(requested: str | None, config: ExecConfig, run_as: RunAs | None) -> str:
    """The realpath of the working directory, inside a workspace root and enterable.

    Raises NOT_AVAILABLE when no root is configured, INVALID_FIELD for a relative path or one
    that is not a directory, PERMISSION_DENIED (naming the path as given) for one under /proc,
    through a link the daemon cannot read, or that resolves outside every root, checked before
    existence so the answer leaks nothing about the host.
    """
    roots = [os.path.realpath(root) for root in config.workspace_roots]
    if not roots:
        raise unavailable("exec")
    given = roots[0] if requested is None else requested
    if not os.path.isabs(given) or "\0" in given:
        raise invalid("WORKING_DIR")
    if _within(os.path.normpath(given), "/proc"):
        # Its links name other processes' roots and cwds, readable or not depending on who
        # asks: no workspace is reached through them, whatever they resolve to.
        raise denied(given)
    try:
        path = os.path.realpath(given)
    except OSError:  # a link the daemon may not read on the way: not a way in
        raise denied(given) from None
    if not any(_within(path, root) for root in roots):
        raise denied(given)
    if not os.path.isdir(path):
        raise invalid("WORKING_DIR")
    if not may_search(path, run_as):
        raise denied(given)
    return path


def open_working_dir(path: str, config: ExecConfig) -> int:
    """An O_PATH descriptor of ``path`` (a checked realpath), opened one component at a time
    from its workspace root without following any symlink.

    The path was checked before; a command running in the workspace could since have swapped
    a directory on it for a symlink to somewhere else. The sandbox binds and enters this
    descriptor, never the path, so what was checked is what is used. Raises PERMISSION_DENIED
    when the path no longer leads to a directory under its root that way. The caller closes it.
    """
    roots = [os.path.realpath(root) for root in config.workspace_roots]
    root = max((r for r in roots if _within(path, r)), key=len, default=None)
    if root is None:
        raise denied(path)
    flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
    fd = os.open(root, flags)
    try:
        for part in os.path.relpath(path, root).split(os.sep):
            if part in ("", "."):
                continue
            inner = os.open(part, flags | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
    except OSError:
        os.close(fd)
        raise denied(path) from None
    return fd


def _within(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root
