"""The one list of specialists the daemon serves, in the order they open (and start their
background tasks). Adding a specialist means adding it here, and nowhere else outside its
folder (docs/adding-an-op.md)."""

from __future__ import annotations

from csp_web.core.specialist import Composable
from specialists.node import NODE
from specialists.tool import TOOL
from specialists.web import WEB

SPECIALISTS: tuple[Composable, ...] = (WEB, TOOL, NODE)
