"""What may run: the seed's dangerous-pattern check, then an argv allow-list with deny rules.

The patterns are one layer and never the only one. A regex over a command string is weak:
``r''m -rf /`` and ``\\rm -rf /`` reach ``rm`` through quoting the regex does not undo;
``$(echo rm) -rf /`` builds the name at run time; ``echo cm0gLXJmIC8K | base64 -d | sh`` hides
the whole command; ``find / -delete`` destroys as well as ``rm`` and matches nothing. So the
patterns are also run over the split argv (which undoes quoting), and the decision that holds
is made on argv: no shell unless configured, the program resolved to a path and looked up in
an allow-list, shells and exec wrappers denied even if allowed by mistake. Behind both stands
the sandbox, which is what actually stops a command that passes.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence

from specialists.tool.exec.config import ExecConfig, ProgramRule

from ._errors import blocked, invalid


def split_command(command: str) -> list[str]:
    """The command split as a POSIX shell would, without expanding anything.

    Metacharacters stay literal arguments (``a | b`` runs ``a`` with ``|`` and ``b``).
    Raises INVALID_FIELD for unbalanced quotes.
    """
    try:
        argv = shlex.split(command)
    except ValueError:
        raise invalid("COMMAND") from None
    if not argv:
        raise invalid("COMMAND")
    return argv


def find_dangerous(text: str, config: ExecConfig) -> str | None:
    """The name of the first dangerous pattern found in ``text``, or None."""
    for name, pattern in config.dangerous_patterns:
        if re.search(pattern, text):
            return name
    return None


def check_patterns(command: str, argv: Sequence[str], config: ExecConfig) -> None:
    """COMMAND_BLOCKED naming the pattern found in the raw command or in its joined argv."""
    for text in (command, " ".join(argv)):
        name = find_dangerous(text, config)
        if name is not None:
            raise blocked(name)


def match_rule(program: str, config: ExecConfig) -> ProgramRule:
    """The allow-list rule for ``program`` as requested (a bare name or an absolute path).

    A bare rule matches a bare name, or an absolute path in one of the search-path directories
    (``/usr/bin/ls`` is ``ls``); it never matches a file in the workspace, which the agent can
    write. Raises COMMAND_BLOCKED when the program is denied or no rule matches.
    """
    check_denied(program, config)
    for rule in config.allowed_programs:
        if _rule_matches(rule, program, config):
            return rule
    raise blocked(program)


def check_denied(path: str, config: ExecConfig) -> None:
    """COMMAND_BLOCKED if ``path`` or its basename is on the deny-list."""
    if path in config.denied_programs or os.path.basename(path) in config.denied_programs:
        raise blocked(path)


def check_args(rule: ProgramRule, args: Sequence[str]) -> None:
    """COMMAND_BLOCKED naming the first argument the rule's regexes refuse."""
    for arg in args:
        if rule.args_match is not None and not re.fullmatch(rule.args_match, arg):
            raise blocked(f"{rule.program} {arg}")
        if any(re.search(pattern, arg) for pattern in rule.deny_args):
            raise blocked(f"{rule.program} {arg}")


def _rule_matches(rule: ProgramRule, program: str, config: ExecConfig) -> bool:
    if os.path.isabs(rule.program):
        return os.path.isabs(program) and rule.program in (
            os.path.normpath(program),
            os.path.realpath(program),
        )
    if os.sep not in program:
        return program == rule.program
    directory, name = os.path.split(os.path.normpath(program))
    return name == rule.program and directory in config.search_path.split(os.pathsep)
