"""A module that starts a thread when imported: a pool warmed on it has no template (a fork
of a threaded process is unsound), and its workers are fresh interpreters."""

from __future__ import annotations

import threading

threading.Thread(target=threading.Event().wait, name="idle", daemon=True).start()
