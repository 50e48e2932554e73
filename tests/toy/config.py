"""The toy specialist's own config section (``toy:`` in config.yaml), kept in its folder."""

from __future__ import annotations

import os
from dataclasses import dataclass

from csp_web.config import ConfigError


@dataclass(frozen=True)
class ToyConfig:
    greeting: str = "hello"
    key_path: str | None = None  # a private key only the daemon may read

    def __post_init__(self) -> None:
        if not self.greeting:
            raise ConfigError("greeting: must not be empty")

    def private_paths(self, state_dir: str) -> tuple[str, ...]:
        """Its state folder and key (``csp_web.config.OwnsPaths``): hidden from commands."""
        key = (self.key_path,) if self.key_path else ()
        return (os.path.join(state_dir, "toy"), *key)
