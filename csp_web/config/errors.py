"""The one configuration error."""

from __future__ import annotations


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the offending key path.

    Raised by the loader, and by a section's own checks (``__post_init__``) with a path
    relative to that section, which the loader prefixes with where the section stands."""
