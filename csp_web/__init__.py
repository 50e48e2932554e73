"""csp-web: a Trio daemon that speaks CSP/1 for web and tool specialists."""

__version__ = "0.1.0"
