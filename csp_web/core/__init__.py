"""The daemon core: the connection loop, the dispatcher (the one place an exception becomes a
reply), slots, deadlines, the op table, the context a handler gets, the Unix socket and the
daemon's lifecycle. It imports no specialist and no memory path."""
