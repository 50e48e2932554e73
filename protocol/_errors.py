"""The one exception the codec raises about bytes it received."""

from __future__ import annotations

from .codes import ErrorCode


class ProtocolError(Exception):
    """The peer sent bytes that are not valid CSP/1.

    ``code`` is the catalogue entry for the FAIL reply and ``detail`` follows the colon.
    ``frame_id`` is the bad frame's ``ID`` value when it could still be read, so the reply can
    be correlated. After raising, the connection has skipped to the end of the bad frame and
    ``next_event`` may be called again (SPEC R-6).
    """

    def __init__(self, code: ErrorCode, detail: str, *, frame_id: str | None = None) -> None:
        super().__init__(f"{code}:{detail}")
        self.code = code
        self.detail = detail
        self.frame_id = frame_id
