"""The scheduler's settings (``tool.cron`` in config.yaml): one frozen dataclass, kept by the
tool specialist's own section (specialists/tool/config.py), read here wherever it stands."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from csp_web.config import Config, shared_section


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


def cron_section(config: Config) -> CronConfig:
    """The cron settings of ``config``: those the specialist running the scheduler keeps in
    its own section (the tool's ``tool.cron``), else the defaults. The scheduler sits below
    the specialists and finds them by their class, not by the section that holds them."""
    return shared_section(config, CronConfig)
