"""The exec engine of the Tool specialist: a command string in, a bounded result out.

    sandbox = await probe_sandbox(config)          # once at start-up; log sandbox.kind
    result = await run_command(ExecRequest("npm test"), config, sandbox=sandbox)
    if (error := result.failure()) is not None:    # non-zero exit or timeout
        raise error

Layers, each assuming the one before it failed: request checks, the seed's dangerous
patterns, an argv allow-list with deny rules (no shell unless configured), and the OS:
bubblewrap (read-only host, private /tmp, no network, own PID namespace), an unprivileged
uid, rlimits, and a timeout that kills the whole tree. A program rule with ``network`` reaches
the hosts it lists through a lane of the guard proxy, and nothing else (_network.py).
"""

from ._cache import cache_key, cacheable
from ._capture import summarize
from ._network import ExecNetwork, sweep_lane_roots
from ._prepare import PreparedCommand, prepare_command
from ._request import ExecRequest
from ._result import ExecResult, Limit
from ._runner import CpuSpent, run_command
from ._sandbox import Sandbox, SandboxKind, probe_sandbox

__all__ = [
    "CpuSpent",
    "ExecNetwork",
    "ExecRequest",
    "ExecResult",
    "Limit",
    "PreparedCommand",
    "Sandbox",
    "SandboxKind",
    "cache_key",
    "cacheable",
    "prepare_command",
    "probe_sandbox",
    "run_command",
    "summarize",
    "sweep_lane_roots",
]
