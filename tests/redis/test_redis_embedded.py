"""Without ``redis.url`` the daemon never loads redis-py: embedded behaviour is unchanged, and
a Python whose redis-py could not import (no async_timeout before 3.11.3) still serves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_an_embedded_daemon_composes_every_specialist_without_importing_redis() -> None:
    code = (
        "import sys\n"
        "import csp_web.cli, specialists\n"
        "from csp_web.app.compose import open_app_daemon\n"
        "from csp_web.app.catalog import SPECIALISTS\n"
        "import specialists.web.services, specialists.tool.ops_exec, csp_web.cron\n"
        "print('redis' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False"
