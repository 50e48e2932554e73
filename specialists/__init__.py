"""The specialists: each a typed ``Specialist`` value in its own folder (``web.WEB``,
``tool.TOOL``), listed once by the composition root (``csp_web.app.catalog``)."""
