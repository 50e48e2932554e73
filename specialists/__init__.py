"""The specialists: each a typed ``Specialist`` value in its own folder (``web.WEB``,
``tool.TOOL``), listed once by the composition root (``csp_web.app.catalog``)."""

# csp-web's own: ``csp_web.app.start`` tells this package from another named ``specialists``.
__csp_web__ = True
