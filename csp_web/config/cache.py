"""The response cache's settings (``web.cache`` in config.yaml): shared infrastructure the web
specialist's own section holds, and whose folder the exec cache and the Redis-down fallback
use too (``Config.cache_dir``)."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class CacheConfig:
    directory: str | None = None  # default: <state_dir>/cache
    size_limit_bytes: int = 256 * 1024 * 1024
    memory_bytes: int = 32 * 1024 * 1024  # hot entries kept in process, in front of the disk
    search_ttl_s: float = 3600.0  # seed 000: "Cached results valid for 1h"
    fetch_ttl_s: float = 86400.0  # seed 000: fetched content, 24 hours
    api_ttl_s: float = 300.0  # seed 000: API responses, default 5 minutes

    def store_dir(self, state_dir: str) -> str:
        return self.directory or os.path.join(state_dir, "cache")

    def private_paths(self, state_dir: str) -> tuple[str, ...]:
        """The cache's folder (``csp_web.config.root.OwnsPaths``)."""
        return (self.store_dir(state_dir),)
