"""The refusals the engine raises, built in one place so every reply has the seed's shape.

Each is an ``OpError`` with a catalogue code, ``SCOPE [shell]`` and the seed's DATA: 126 for a
path that may not be used (the seed's ``permission_denied`` example), 127 for a program that is
not there (the shell's "command not found"), ``none`` when nothing was looked up.
"""

from __future__ import annotations

from csp_web.core.api.errors import OpError
from protocol import ErrorCode

SCOPE = ("shell",)


def invalid(field: str) -> OpError:
    """A request field (``COMMAND``, ``TIMEOUT_MS``, ``WORKING_DIR``, ``ENV``) is malformed."""
    return OpError(ErrorCode.INVALID_FIELD, field, scope=SCOPE)


def too_long(what: str, bound: str) -> OpError:
    """``what`` (``ENV NAME``, or ``ENV`` with COMMAND) is more than execve takes: INVALID_FIELD
    saying so and naming ``bound`` (the kernel would answer E2BIG, which read as the command's
    failure, DATA exit:null, with no cause)."""
    return OpError(
        ErrorCode.INVALID_FIELD,
        f"{what} too long for the kernel: over {bound} (E2BIG)",
        scope=SCOPE,
    )


def blocked(what: str) -> OpError:
    """The policy refuses the command; ``what`` names the program, argument, pattern or name."""
    return OpError(ErrorCode.COMMAND_BLOCKED, what, scope=SCOPE)


def denied(path: str) -> OpError:
    """``path`` (an executable or working directory) may not be used by the sandbox user."""
    return OpError(ErrorCode.PERMISSION_DENIED, path, scope=SCOPE, data="exit:126")


def not_found(program: str) -> OpError:
    """No executable ``program`` exists in the sandbox's view."""
    return OpError(ErrorCode.COMMAND_FAILED, program, scope=SCOPE, data="exit:127")


def unavailable(what: str) -> OpError:
    """The engine cannot run here: exec unconfigured, or a required tool missing."""
    return OpError(ErrorCode.NOT_AVAILABLE, what, scope=SCOPE)
