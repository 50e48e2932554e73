"""Quotes checked against stored snapshots: the ``verify`` op (issue 29)."""
