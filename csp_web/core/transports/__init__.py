"""Where the daemon's streams come from: stdin/stdout, the Unix socket (peer credentials
checked on accept) and systemd's socket activation, readiness and watchdog."""
