"""The one catalogue of CSP/1 error codes.

Every FAIL reply carries ``ERROR <code>:<detail>`` with a code from this table, as wsproto's
``CloseReason`` and httpx's ``codes`` keep one table for their protocols. The meaning beside each
code is what SPEC.md prints; ``python -m protocol.codes`` lists them.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.StrEnum):
    """An error code; its value is the wire spelling, its ``meaning`` one line for humans."""

    meaning: str

    def __new__(cls, value: str, meaning: str) -> ErrorCode:
        member = str.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        return member

    # Framing (protocol/): the frame itself is unusable.
    BAD_FRAME = "bad_frame", "the frame breaks the CSP/1 grammar"
    BAD_HEADER = "bad_header", "the first line is not a TASK or STATUS header"
    BAD_ENCODING = "bad_encoding", "a line is not strict UTF-8 or holds a control character"
    BAD_VALUE = "bad_value", "a quoted value is not one JSON string literal"
    FRAME_TOO_LARGE = "frame_too_large", "a line, the frame or its field count passed a limit"
    FRAME_TIMEOUT = "frame_timeout", "a started frame was not completed in time"
    TOO_MANY_BAD_FRAMES = "too_many_bad_frames", "the peer sent too many malformed frames"
    TOO_MANY_BLANK_LINES = "too_many_blank_lines", "too many empty lines in a row between frames"

    # Dispatch (csp_web/): the frame parsed but names no runnable task.
    UNKNOWN_OP = "unknown_op", "no op has this REQ"
    WRONG_DOMAIN = "wrong_domain", "the op exists but not under this IN domain"
    WRONG_OUT = "wrong_out", "the op does not produce this OUT kind"
    MISSING_FIELD = "missing_field", "a required field is absent"
    INVALID_FIELD = "invalid_field", "a field value has the wrong type or is out of bounds"
    UNKNOWN_FIELD = "unknown_field", "the op does not take this field"
    DUPLICATE_FIELD = "duplicate_field", "a field that may appear once appears twice"

    # Admission and time.
    BUSY = "busy", "the specialist's running and queued slots are all taken"
    TIMEOUT_EXCEEDED = "timeout_exceeded", "the task's deadline passed; its work was cancelled"
    RATE_LIMITED = "rate_limited", "a rate limit has no token within the task's deadline"
    SHUTTING_DOWN = "shutting_down", "the daemon is stopping and takes no new work"
    OUTBOX_FULL = "outbox_full", "the memory outbox is full; work that must be logged is refused"
    STORAGE_FULL = (
        "storage_full",
        "a disk the daemon writes to (outbox, cache, memory, media, state) is full: nothing kept",
    )
    INTERNAL_ERROR = "internal_error", "a bug: the daemon logged a traceback"
    NOT_AVAILABLE = "not_available", "the feature is not configured or cannot run on this host"
    DAEMON_UNAVAILABLE = "daemon_unavailable", "the daemon behind csp-web mcp --socket is down"

    # Memory Specialist relay.
    MEMORY_UNAVAILABLE = "memory_unavailable", "the Memory Specialist cannot be reached"
    MEMORY_ERROR = "memory_error", "the Memory Specialist answered with a failure"
    ID_CONFLICT = "id_conflict", "the write's ID is already stored with other content"
    NOT_FOUND = "not_found", "the Memory Specialist holds no write at this PATH"

    # Web specialist.
    URL_REJECTED = "url_rejected", "the URL fails the gate: scheme, port, host or syntax"
    SSRF_BLOCKED = "ssrf_blocked", "the host resolves to an address the deny table blocks"
    DNS_FAILED = "dns_failed", "the host name did not resolve in time"
    ROBOTS_DISALLOWED = "robots_disallowed", "robots.txt forbids this URL for our User-Agent"
    FETCH_FAILED = "fetch_failed", "the page could not be fetched (network, status or timeout)"
    TOO_LARGE = (
        "too_large",
        "the response header block or body passed a byte cap, or reading it a reader's bound",
    )
    TOO_MANY_REDIRECTS = "too_many_redirects", "more redirects than the limit"
    UNSUPPORTED_CONTENT = "unsupported_content", "the content type cannot be extracted as asked"
    SEARCH_API_ERROR = "search_api_error", "every configured search backend failed"
    API_ERROR = "api_error", "a configured API answered with an error status"
    UNKNOWN_API = "unknown_api", "ENDPOINT names an API that is not configured"
    SUMMARIZE_FAILED = "summarize_failed", "the summarizer could not produce bullets"
    UNKNOWN_FILE_KEY = (
        "unknown_file_key",
        "FILE_KEY names no content held (expired or never fetched)",
    )
    FILE_EXISTS = "file_exists", "the target file exists and OVERWRITE was not asked"
    EMPTY_CONTENT = (
        "empty_content",
        "the page loaded but yields no text (empty body, script-only page, no text)",
    )
    NO_TEXT_LAYER = (
        "no_text_layer",
        "the document has no text to read: encrypted, or a scan (OCR is out of scope)",
    )
    PROXY_FAILED = "proxy_failed", "the web.proxy forward proxy refused or broke the tunnel"
    UNKNOWN_RESEARCH_JOB = "unknown_research_job", "JOB_ID names no research job held now"
    RESEARCH_FAILED = "research_failed", "the research found no source it could read"
    CORRUPT_DOCUMENT = (
        "corrupt_document",
        "the document does not parse as its type (a damaged or truncated zip, XML or CSV)",
    )

    # Tool specialist.
    COMMAND_FAILED = "command_failed", "the command exited non-zero or was killed"
    COMMAND_BLOCKED = "command_blocked", "the exec policy refuses this command"
    PERMISSION_DENIED = "permission_denied", "the executable or path may not be used"
    MCP_UNAVAILABLE = "mcp_unavailable", "the MCP server is not configured, cannot start or answer"
    MCP_TOOL_ERROR = "mcp_tool_error", "the MCP tool returned an error result"
    CRON_ERROR = "cron_error", "the cron action cannot be carried out"
    UNKNOWN_JOB = "unknown_job", "JOB_ID names no cron job"

    # Paired nodes (protocol/NODES.md).
    NODE_UNKNOWN = "node_unknown", "NODE names no paired node"
    NODE_UNAVAILABLE = "node_unavailable", "the paired node is not connected or its link broke"
    NODE_CAPABILITY_MISSING = "node_capability_missing", "the node does not offer this action"
    NODE_ERROR = "node_error", "the node failed the action or sent a reply that breaks its schema"
    PAIR_CODE_INVALID = "pair_code_invalid", "the pairing code is unknown, expired or used"
    # Browser and canvas (specialists/browser).
    SELECTOR_NOT_FOUND = "selector_not_found", "the SELECTOR matches no element on the page"
    BROWSER_UNAVAILABLE = "browser_unavailable", "Chromium cannot be started or died mid-action"
    NAVIGATION_FAILED = "navigation_failed", "the page did not load (network error or timeout)"
    ACTION_FAILED = "action_failed", "the element could not be clicked, typed into or read"
    TOO_MANY_SESSIONS = "too_many_sessions", "a browser session cap (per peer or overall) is met"
    SESSION_NOT_FOUND = "session_not_found", "SESSION names no open session of this peer"
    UNKNOWN_NODE = "unknown_node", "NODE names no canvas node"
    CANVAS_NOT_PRESENTED = "canvas_not_presented", "the canvas shows nothing: present first"
    EVAL_FAILED = "eval_failed", "the canvas expression threw or its result is not JSON"
    SESSION_LOST = (
        "session_lost",
        "the session's (or canvas node's) page was lost since its last action; the name is free",
    )
    PAGE_CRASHED = "page_crashed", "the page's renderer crashed mid-action (out of memory, killed)"
    REF_STALE = "ref_stale", "REF names no element now: the page navigated or changed since"
    TAB_NOT_FOUND = "tab_not_found", "TAB names no open tab of the session"
    WAIT_TIMEOUT = "wait_timeout", "what the browser waited for did not come before the deadline"
    STATE_NOT_FOUND = (
        "state_not_found",
        "NAME or STATE names no saved browser state (never saved, forgotten or expired)",
    )
    STATE_UNREADABLE = (
        "state_unreadable",
        "the saved browser state does not decrypt: tampered with, replaced or another key's",
    )
    TOO_MANY_STATES = "too_many_states", "the uid holds max_states_per_peer saved browser states"

    # Cancellation (SPEC C-6).
    CANCELLED = "cancelled", "the task was cancelled: by REQ:cancel, or its connection closed"
    UNKNOWN_TASK = "unknown_task", "TARGET names no unfinished task of this uid"

    # The daemon's worker processes (csp_web/infra/workers.py, web.workers).
    WORKER_FAILED = (
        "worker_failed",
        "the worker process running the task's CPU work died, was killed or passed its deadline",
    )

    # Budgets (SPEC D-3).
    BUDGET_EXHAUSTED = (
        "budget_exhausted",
        "the task's BUDGET (or its BUDGET_ID's) has no more of the named dimension",
    )


def main() -> None:
    """Print the catalogue, one ``code  meaning`` line each."""
    width = max(len(code) for code in ErrorCode)
    for code in ErrorCode:
        print(f"{code:<{width}}  {code.meaning}")


if __name__ == "__main__":
    main()
