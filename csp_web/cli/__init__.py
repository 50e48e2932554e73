"""The command line: ``serve``, ``send``, ``replay``, ``memory-sink``, ``config``,
``check-config``. ``main`` (in ``commands``) is the ``csp-web`` console script."""

from csp_web.cli.commands import main

__all__ = ["main"]
