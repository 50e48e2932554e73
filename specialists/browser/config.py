"""The browser and canvas ops' settings: the browser specialist's own section, read at
``tool.browser`` in config.yaml. Frozen dataclasses, units in names.

Every default cites where it comes from; ``config.yaml`` repeats them (a test checks it).
"""

from __future__ import annotations

import base64
import binascii
import os
import shutil
from dataclasses import dataclass, field

from csp_web.config import Config, section_of

# Its own section, where config.yaml has always kept it: under the tool section.
SECTION = "tool.browser"


@dataclass(frozen=True)
class CanvasConfig:
    """Node ``main``'s canvas: a Chromium page at WIDTH x HEIGHT on this host."""

    width: int = 1920  # the tool seed's example canvas: WIDTH 1920, HEIGHT 1080
    height: int = 1080
    # An X display (":0") shows the canvas in a real window (a wall screen, a kiosk), from a
    # second, headed Chromium; null keeps it headless in the shared browser.
    display: str | None = None
    # eval runs page JavaScript chosen by the caller: off unless the operator turns it on.
    allow_eval: bool = False
    eval_timeout_ms: int = 2000  # the seed's canvas target is < 1 s; twice that is a hang
    max_eval_result_bytes: int = 64 * 1024  # the JSON result, as UTF-8


@dataclass(frozen=True)
class BrowserConfig:
    """The shared Chromium, its sessions and their caps, and the media it writes."""

    # The Chromium to drive; empty: the first of chromium, chromium-browser on PATH (Debian's
    # package; Playwright's own browser downloads cannot work offline and are never used).
    executable: str = ""
    # Sessions are BrowserContexts: each costs ~10-30 MB in Chromium. 16 overall and 4 per
    # peer keep a small host (2 cores, 2 GB) responsive.
    max_sessions: int = 16
    max_sessions_per_peer: int = 4
    # A session's own page plus the popups it may keep open.
    max_pages_per_session: int = 4
    session_idle_s: float = 300.0  # Playwright MCP closes nothing; 5 min frees a left session
    # Actions without SESSION each hold a context while they run: a cap of their own, apart
    # from the sessions', so a peer with its sessions open can still run one (issue 22).
    max_oneshot_per_peer: int = 4
    # The canvas belongs to the uid that presented it until it hides it or leaves it unused
    # this long (as session_idle_s); then another uid may take it over (issue 22).
    canvas_idle_s: float = 300.0
    # V8's old-space cap per renderer (--js-flags=--max-old-space-size): a page that
    # allocates without bound crashes its own renderer there instead of growing Chromium
    # without bound (832 MB to 2.4 GB on one page, issue 22). 512 MB holds any real page.
    max_js_heap_mb: int = 512
    viewport_width: int = 1280  # Playwright's default viewport
    viewport_height: int = 720
    max_screenshot_bytes: int = 8 * 1024 * 1024  # a full-page PNG of a long page, and no more
    max_extract_chars: int = 100_000  # as web.fetch's largest MAX_CHARS
    # ACTION snapshot (issue 25). One reply's text, MAX_CHARS's default and largest: 40,000
    # chars are ~10k tokens, a tool result a model can still work beside; longer pages
    # page with START. @playwright/mcp has no bound, and its huge snapshots are its users'
    # first complaint.
    snapshot_max_chars: int = 40_000
    # Refs one snapshot issues (the elements of a 100k-element page would flood a model and
    # the page's ref book): past it the text is cut there and the reply says too_large.
    snapshot_max_refs: int = 2_000
    # Levels of the tree, DEPTH's default and largest: real pages nest 20-40 deep; the
    # bound keeps a pathological nesting from running Playwright's walk to the deadline.
    snapshot_max_depth: int = 64
    # Elements a snapshot may walk (the page's, every frame's): Playwright's walk has no
    # bound of its own and takes about a second per few thousand elements on a busy 2-core
    # host; a long real page (a Wikipedia article) has 10-20k. Past it: too_large, scope it.
    snapshot_max_elements: int = 50_000
    # An upload's file, sent to Chromium inline: Playwright refuses inline buffers past
    # 50 MB; 16 MiB holds what forms take (photos, PDFs, office files) at a third of that.
    max_upload_bytes: int = 16 * 1024 * 1024
    # A page printed to PDF, kept as a fileKey: 32 MiB holds a long page with its images
    # (a 100-page text PDF is ~1 MB) and stops a page built to print without end.
    max_pdf_bytes: int = 32 * 1024 * 1024
    # A fresh browser process after this many pages: Chromium's memory grows with pages made
    # and closed, and a recycle keeps it flat (the bench measures RSS after 1,000 actions).
    recycle_after_pages: int = 200
    launch_timeout_s: float = 30.0  # Playwright's own default launch timeout
    # Screenshots and snapshots: <state_dir>/media, oldest removed past either bound.
    media_max_bytes: int = 256 * 1024 * 1024
    media_max_age_s: float = 86_400.0
    # Base64 SHA-256 hashes of certificate public keys (SPKI) whose chains Chromium accepts
    # though no system root signs them: a test CA, a private one. Never a blanket ignore.
    trusted_spki: tuple[str, ...] = ()
    # Downloads a page starts (issue 25): each kept in web's fileKey store up to this many
    # bytes (50 MiB: a large PDF or office file, far under the store's disk); 0 refuses every
    # download. One action keeps at most max_downloads_per_action of them; the rest are
    # cancelled (a page may start a thousand).
    max_download_bytes: int = 50 * 1024 * 1024
    max_downloads_per_action: int = 4
    # Logins kept (save_state, issue 25): a saved state expires after state_ttl_s (30 days, as
    # the issue asks); a uid keeps at most max_states_per_peer, each at most max_state_bytes
    # of Playwright's storage_state JSON (1 MiB: cookies and local storage of a few origins).
    state_ttl_s: float = 30 * 86_400.0
    max_states_per_peer: int = 16
    max_state_bytes: int = 1024 * 1024
    canvas: CanvasConfig = field(default_factory=CanvasConfig)

    def input_paths(self) -> tuple[str, ...]:
        """The Chromium it runs, as the daemon's PATH finds a bare name
        (``csp_web.config.ReadsInputs``): no command may replace it."""
        if not self.executable or os.sep in self.executable:
            return (self.executable,) if self.executable else ()
        found = shutil.which(self.executable)
        return (found,) if found else ()

    def __post_init__(self) -> None:
        for value in self.trusted_spki:
            try:
                raw = base64.b64decode(value, validate=True)
            except binascii.Error as exc:
                raise ValueError(f"trusted_spki: {value!r} is not base64") from exc
            if len(raw) != 32:
                raise ValueError(f"trusted_spki: {value!r} is not a SHA-256 hash")
        for name in (
            "max_oneshot_per_peer",
            "max_js_heap_mb",
            "snapshot_max_chars",
            "snapshot_max_refs",
            "snapshot_max_depth",
            "snapshot_max_elements",
            "max_downloads_per_action",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        for name in ("max_download_bytes", "max_states_per_peer", "max_state_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if self.state_ttl_s <= 0:
            raise ValueError("state_ttl_s must be positive")
        if self.max_sessions_per_peer > self.max_sessions:
            raise ValueError("max_sessions_per_peer must not exceed max_sessions")


def browser_section(config: Config) -> BrowserConfig:
    """The browser's own section of ``config`` (its defaults if the file has none)."""
    return section_of(config, SECTION, BrowserConfig)
