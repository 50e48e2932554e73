"""Every check made before a command may start, in one order, ending in an exact argv.

Cheap, I/O-light refusals come first (fields, patterns, the allow-list by name), then the
filesystem (working directory, executable), so a refused program is never even looked up.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from csp_web.config import expand_protected
from csp_web.core.api.errors import OpError
from specialists.tool.exec.config import ExecConfig, ProgramRule, overlaps

from ._destinations import Destination
from ._errors import blocked, denied, unavailable
from ._policy import check_args, check_denied, check_patterns, match_rule, split_command
from ._protect import Layout, plan_layout
from ._request import ExecRequest, check_command, check_env, check_timeout, resolve_working_dir
from ._resolve import resolve_program
from ._sandbox import Sandbox


@dataclass(frozen=True, slots=True)
class PreparedCommand:
    """A command that passed every check: what to exec, where, with which environment."""

    command: str
    argv: tuple[str, ...]  # argv[0] is an absolute path
    program: str
    working_dir: str
    env: Mapping[str, str]
    timeout_ms: int
    shell: bool
    layout: Layout = field(default_factory=Layout)  # protected paths inside it (_protect.py)
    # Where its program rule lets it connect, through a guard proxy lane (_network.py).
    destinations: tuple[Destination, ...] = ()


def prepare_command(
    request: ExecRequest, config: ExecConfig, *, sandbox: Sandbox
) -> PreparedCommand:
    """Check ``request`` against ``config`` and resolve it for ``sandbox``; runs nothing.

    Raises OpError: INVALID_FIELD (command, timeout, env name, working dir malformed),
    COMMAND_BLOCKED (shell not allowed, dangerous pattern, program not allowed or denied,
    argument refused, env name not allowed), PERMISSION_DENIED (working dir outside the roots
    or at, in or around one of the daemon's own paths, holding a protected path without
    bubblewrap or a symlink on the way to one; executable not executable by the sandbox
    user; DATA exit:126), COMMAND_FAILED (no such program; DATA exit:127),
    NOT_AVAILABLE (no workspace root configured; a program rule with ``network`` and no
    bubblewrap).
    """
    check_command(request.command)
    timeout_ms = check_timeout(request.timeout_ms, config)
    extra_env = check_env(request.env, config)
    argv = _screen(request, config)
    working_dir = resolve_working_dir(request.working_dir, config, sandbox.run_as)
    if any(overlaps(working_dir, path) for path in sandbox.private):
        raise denied(request.working_dir or working_dir)  # the daemon's own state or socket
    layout = _protection(working_dir, config, sandbox)
    rule = None  # a shell has no rule: no network, no rule env
    try:
        if request.shell:
            program, resolved = "shell", _shell_argv(request.command, config, sandbox, working_dir)
        else:
            program = os.path.basename(argv[0])
            rule, resolved = _program_argv(argv, config, sandbox, working_dir)
    except OSError:  # a link the daemon may not read on the way (/proc/1/root/usr/bin/ls)
        raise denied(config.shell_program if request.shell else argv[0]) from None
    destinations = _network_of(rule, sandbox)
    return PreparedCommand(
        command=request.command,
        argv=tuple(resolved),
        program=program,
        working_dir=working_dir,
        env={**_environment(working_dir, extra_env, config), **(rule.env if rule else {})},
        timeout_ms=timeout_ms,
        shell=request.shell,
        layout=layout,
        destinations=destinations,
    )


def _network_of(rule: ProgramRule | None, sandbox: Sandbox) -> tuple[Destination, ...]:
    """The rule's destinations; NOT_AVAILABLE for a rule with some and no bubblewrap: without
    a network namespace the command would reach everything directly, past the proxy."""
    destinations = rule.destinations if rule is not None else ()
    if destinations and sandbox.kind != "bwrap":
        raise unavailable("network needs bwrap")
    return destinations


def _protection(working_dir: str, config: ExecConfig, sandbox: Sandbox) -> Layout:
    """The layout keeping the protected paths in ``working_dir`` unchanged; PERMISSION_DENIED
    naming a protected path there when the sandbox cannot mount (no bubblewrap), or a
    symlink on the way to one (see ``plan_layout``)."""
    masked = [os.path.realpath(path) for path in (*config.masked_paths, *sandbox.private)]
    protected = expand_protected(config.protected_paths)
    layout = plan_layout(working_dir, protected, masked, run_as=sandbox.run_as)
    if sandbox.kind != "bwrap" and (layout.readonly or layout.working_dir_readonly):
        raise denied(layout.readonly[0] if layout.readonly else working_dir)
    return layout


def _screen(request: ExecRequest, config: ExecConfig) -> list[str]:
    """The split command, once the patterns found nothing in it.

    With ``shell`` the patterns are the only policy before the sandbox (a shell runs whatever
    it is given); the split is still tried, for quoting tricks, when it parses.
    """
    if not request.shell:
        argv = split_command(request.command)
    elif not config.allow_shell:
        raise blocked("shell")
    else:
        try:
            argv = split_command(request.command)
        except OpError:
            argv = []
    check_patterns(request.command, argv, config)
    return argv


def _environment(working_dir: str, extra: dict[str, str], config: ExecConfig) -> dict[str, str]:
    """The whole environment: nothing of the daemon's own is inherited."""
    base = {"PATH": config.search_path, "LANG": config.locale, "HOME": working_dir}
    return {**base, "TMPDIR": "/tmp", **extra}


def _shell_argv(command: str, config: ExecConfig, sandbox: Sandbox, working_dir: str) -> list[str]:
    shell = resolve_program(
        config.shell_program,
        working_dir=working_dir,
        search_path=config.search_path,
        hidden=sandbox.hidden,
        run_as=sandbox.run_as,
    )
    return [shell, "-c", command]


def _program_argv(
    argv: list[str], config: ExecConfig, sandbox: Sandbox, working_dir: str
) -> tuple[ProgramRule, list[str]]:
    name = argv[0]
    requested = os.path.normpath(os.path.join(working_dir, name)) if os.sep in name else name
    if overlaps(requested, "/proc"):  # other processes' roots: as for WORKING_DIR
        raise denied(name)
    rule = match_rule(requested, config)
    check_args(rule, argv[1:])
    path = resolve_program(
        name,
        working_dir=working_dir,
        search_path=config.search_path,
        hidden=sandbox.hidden,
        run_as=sandbox.run_as,
    )
    check_denied(os.path.realpath(path), config)  # a symlink to a denied program
    return rule, [path, *argv[1:]]
