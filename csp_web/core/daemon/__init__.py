"""A daemon: built from the specialists it is given (``compose``), served on its transports
until stopped (``lifecycle``), owning its state directory (``statedir``)."""
