"""The command line: ``serve``, ``send``, ``replay``, ``memory-sink``, ``config``,
``check-config`` (``csp_web.cli.main``)."""
