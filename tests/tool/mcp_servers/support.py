"""What the MCP pool's tests share: the toy server's paths and configurations."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from specialists.tool.mcp.config import McpConfig, StdioServerConfig

TOY_SERVER = Path(__file__).with_name("toy_server.py")


def toy_stdio() -> StdioServerConfig:
    """The toy server, spawned with this interpreter."""
    return StdioServerConfig(command=sys.executable, args=(str(TOY_SERVER),))


def toy_config(**options: Any) -> McpConfig:
    """One stdio server named ``toy``, with restart delays short enough for a test."""
    quick = {"backoff_initial_s": 0.05, "backoff_max_s": 0.2, "probe_timeout_s": 2.0}
    servers = options.pop("servers", {"toy": toy_stdio()})
    return McpConfig(servers=servers, **(quick | options))


def process_exists(pid: int) -> bool:
    """Whether ``pid`` names a process (zombies included: an unreaped child still counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
