"""The daemon core, by layer, lowest first: ``api`` (what a specialist's op uses: the op table,
fields, context, errors, replies, records, ports), ``dispatch`` (running one task: admission,
deadlines, cancels, the IN:SYS ops, the one place an exception becomes a reply), ``transports``
(stdin/stdout, the Unix socket, systemd), ``wire`` (the one loop between a byte stream and the
dispatcher) and ``daemon`` (building a daemon from specialists and serving it). A layer imports
only the ones before it; the core imports no specialist, memory path, client or front end."""
