"""The op API: what a specialist's ops and services use from the core (the op table, field
schemas, the handler's context, errors, results, memory records and the ports to the layers
above)."""
