"""What the documents product uses of the web specialist's services: the pages' (its ops read
snapshots by fileKey and keep the peers' board), and no state of its own beyond them."""

from __future__ import annotations

from typing import Protocol

from ..pages.services import PagesServices


class DocsServices(PagesServices, Protocol):
    """The board, save, cabinet and write_file ops read only these."""
