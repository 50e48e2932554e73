"""The tool specialist's section (``tool``): exec, cron, MCP. ``tool.browser`` is the browser
specialist's own section (specialists/browser/config.py), read by the loader at that key."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

from specialists.tool.exec.config import ExecConfig
from specialists.tool.mcp.config import McpConfig


@dataclass(frozen=True)
class CronConfig:
    store_path: str | None = None  # default: <state_dir>/cron.json
    max_jobs: int = 100
    history: int = 10  # outcomes kept per job and shown by ACTION list
    # Missed runs while the daemon was down: "skip" them, or "run_once" for all of them.
    default_missed: Literal["skip", "run_once"] = "skip"

    def private_paths(self, state_dir: str) -> tuple[str, ...]:
        """The cron store's folder (``csp_web.config.root.OwnsPaths``)."""
        return (os.path.dirname(os.path.abspath(self.store_path)),) if self.store_path else ()


@dataclass(frozen=True)
class ToolConfig:
    exec: ExecConfig = field(default_factory=ExecConfig)
    cron: CronConfig = field(default_factory=CronConfig)
    mcp: McpConfig = field(default_factory=McpConfig)
