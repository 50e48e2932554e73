"""The codec stays sans-IO: importing it pulls in no I/O library (STYLE: the shape of the house)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Libraries that do I/O, run event loops or configure logging; none belongs under protocol/.
FORBIDDEN = (
    "trio",
    "httpx",
    "httpcore",
    "anyio",
    "yaml",
    "asyncio",
    "socket",
    "ssl",
    "selectors",
    "subprocess",
    "logging",
    "csp_web",
    "specialists",
)

_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import protocol
for name in protocol.__all__:  # the public names load on first use
    getattr(protocol, name)
print(json.dumps(sorted(sys.modules)))
"""


def modules_after_importing_protocol() -> list[str]:
    """sys.modules of a fresh interpreter (-I -S: no site, no env) after ``import protocol``."""
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _PROBE, str(REPO)],
        capture_output=True,
        check=True,
        text=True,
        timeout=60,
    )
    modules = json.loads(done.stdout)
    assert isinstance(modules, list)
    return [str(name) for name in modules]


def test_importing_protocol_loads_no_io_event_loop_or_logging_module() -> None:
    modules = modules_after_importing_protocol()
    assert "protocol._connection" in modules
    loaded = sorted(name for name in modules if name.partition(".")[0] in FORBIDDEN)
    assert loaded == []


def test_each_public_name_loads_from_its_module_and_no_other_name_exists() -> None:
    """The package's face is loaded on first use (so ``python -m protocol.codes`` runs the
    catalogue once): every name of ``__all__`` resolves, ``dir`` lists it, others raise."""
    import protocol
    from protocol import _connection, codes

    assert protocol.Connection is _connection.Connection
    assert protocol.ErrorCode is codes.ErrorCode
    assert sorted(protocol._SOURCES) == sorted(protocol.__all__)
    assert all(getattr(protocol, name) is not None for name in protocol.__all__)
    assert set(protocol.__all__) <= set(dir(protocol))
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = protocol.Nothing
