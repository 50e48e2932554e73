"""The seed's opt-in result cache: its key and which commands may use it (the lead wires it).

The seed keys on SHA256(command + working_dir). Plain concatenation makes ``ls a`` in ``/w``
and ``ls`` in ``a/w``-like pairs collide, so the parts are joined with NUL, which neither can
hold; the shell flag and the added environment are in the key too, since either changes what
the same string does.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from specialists.tool.exec.config import ExecConfig


def cache_key(
    command: str, working_dir: str, *, shell: bool = False, env: Mapping[str, str] | None = None
) -> str:
    """Hex SHA-256 of the command and its realpath'd working directory (and shell, env)."""
    parts = [command, working_dir, "shell" if shell else "argv"]
    parts += [f"{name}={value}" for name, value in sorted((env or {}).items())]
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def cacheable(command: str, config: ExecConfig) -> bool:
    """True if ``command`` fullmatches one of ``cache_safe_patterns`` (reads the operator
    vouched for; the seed's TTL is ``cache_ttl_s``). Nothing is cacheable by default."""
    return any(re.fullmatch(pattern, command) for pattern in config.cache_safe_patterns)
