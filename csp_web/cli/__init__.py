"""The command line's own programs: ``send`` (a client of a running daemon) and ``replay``
(transcripts and their HTTP cassettes). The ``csp-web`` command itself, which picks the
program to run, is the composition root's (``csp_web.app.main``)."""
