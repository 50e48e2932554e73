"""The reference Memory Specialist (``csp-web memory-sink``): its ops, store and commits."""
