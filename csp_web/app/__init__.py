"""The composition root: the one place that names the specialists (``catalog``) and builds
the daemon from them; the ops reference (``opsdoc``) is rendered from the same list."""
