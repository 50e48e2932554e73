"""Documents: the announcement board, the cabinet (saved snapshots) and workspace files, and
their ops (board, save, cabinet, write_file)."""
