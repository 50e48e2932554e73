"""Finding the executable the sandbox will run, as the sandbox sees the filesystem.

The sandbox shows the host read-only, minus the masked paths, plus the working directory, so
the search runs on the host with masked paths treated as absent. The result is an absolute
path that is handed to exec as is: nothing inside the sandbox searches PATH again.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ._access import RunAs, may_execute
from ._errors import denied, not_found


def resolve_program(
    program: str,
    *,
    working_dir: str,
    search_path: str,
    hidden: Sequence[str],
    run_as: RunAs | None,
) -> str:
    """The absolute path of ``program`` (bare name: searched on ``search_path``; else a path
    relative to ``working_dir``).

    Like execvp, a candidate that exists but may not be executed is skipped and reported only
    if nothing later matches. Raises COMMAND_FAILED (DATA exit:127) when nothing is there and
    PERMISSION_DENIED (DATA exit:126) when it is there but not executable by ``run_as``.
    Empty PATH entries (the current directory, in POSIX) are ignored on purpose.
    """
    if os.sep in program:
        return _check_path(
            os.path.normpath(os.path.join(working_dir, program)), working_dir, hidden, run_as
        )
    refused: str | None = None
    for directory in filter(None, search_path.split(os.pathsep)):
        candidate = os.path.join(directory, program)
        if _is_hidden(candidate, working_dir, hidden) or not os.path.exists(candidate):
            continue
        if may_execute(candidate, run_as):
            return candidate
        refused = refused or candidate
    if refused is not None:
        raise denied(refused)
    raise not_found(program)


def _check_path(path: str, working_dir: str, hidden: Sequence[str], run_as: RunAs | None) -> str:
    if _is_hidden(path, working_dir, hidden) or not os.path.exists(path):
        raise not_found(path)
    if not may_execute(path, run_as):
        raise denied(path)
    return path


def _is_hidden(path: str, working_dir: str, hidden: Sequence[str]) -> bool:
    """Under a masked path and not brought back by the working directory's bind."""
    for candidate in {path, os.path.realpath(path)}:
        if _under(candidate, working_dir):
            continue
        if any(_under(candidate, mask) for mask in hidden):
            return True
    return False


def _under(path: str, directory: str) -> bool:
    return os.path.commonpath([path, directory]) == directory
