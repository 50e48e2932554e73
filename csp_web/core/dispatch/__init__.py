"""Running one task: look-up, validation, admission to its slot pool, its deadline, cancels,
audit and reply; the daemon's own IN:SYS ops and their counters."""
