"""The specialists: web and tool handlers, registered with the daemon's op table."""
