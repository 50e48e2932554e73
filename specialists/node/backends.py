"""The reference node's capabilities, each backed by a real, commonly installed tool and
offered only when that tool (and what it needs) is present:

- ``notify``: ``notify-send`` (libnotify) on a D-Bus session bus;
- ``screen_record``: ffmpeg ``x11grab`` under ``$DISPLAY`` (an mp4 clip, or a png screenshot);
- ``camera_snap``: ffmpeg from a V4L2 device, or a configured ffmpeg lavfi test source
  (``--camera-source testsrc=size=640x480:rate=1``: machines without a camera, tests);
- ``location_get``: GeoClue's ``where-am-i`` where installed, else a configured fixed
  position, reported ``SOURCE fixed``.

``canvas`` is not offered: it needs the browser issue's Chromium page (NODES.md, the seam).
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import trio

from protocol import ErrorCode

log = logging.getLogger(__name__)
WHERE_AM_I = "/usr/libexec/geoclue-2.0/demos/where-am-i"
_STDERR_CHARS = 300
# ASCII digits only ([0-9], not \d), one optional point: what float() reads and nothing more.
_GEOCLUE = re.compile(
    r"(Latitude|Longitude|Accuracy):\s*(-?[0-9]{1,9}(?:\.[0-9]{1,12})?)(?![0-9.])"
)


class BackendError(Exception):
    """The action failed on this node; ``code`` is the catalogue code it reports."""

    def __init__(self, code: ErrorCode, detail: str) -> None:
        super().__init__(f"{code}:{detail}")
        self.code = code
        self.detail = detail


@dataclass(frozen=True)
class Capture:
    """An action's outcome: DATA (when no media), further reply fields, media and its type."""

    data: str
    fields: tuple[tuple[str, str], ...] = ()
    media: bytes | None = None
    mime: str | None = None


@dataclass(frozen=True)
class BackendOptions:
    display: str | None = None  # default: $DISPLAY
    camera_device: str = "/dev/video0"
    camera_source: str | None = None  # an ffmpeg lavfi graph standing in for a camera
    location: tuple[float, float, float] | None = None  # lat, lon, accuracy in metres
    max_record_s: float = 30.0
    ffmpeg: str = "ffmpeg"
    notify_send: str = "notify-send"


Backend = Callable[[Mapping[str, Any]], Awaitable[Capture]]


def detect(options: BackendOptions) -> dict[str, Backend]:
    """The actions this machine can run, each with its backend (logged)."""
    found: dict[str, Backend] = {}
    ffmpeg = shutil.which(options.ffmpeg)
    notify = shutil.which(options.notify_send)
    if notify and os.environ.get("DBUS_SESSION_BUS_ADDRESS"):
        found["notify"] = lambda params: notify_send(notify, params)
    display = options.display or os.environ.get("DISPLAY")
    if ffmpeg and display:
        found["screen_record"] = lambda params: screen_record(ffmpeg, display, options, params)
    if ffmpeg and (options.camera_source or os.path.exists(options.camera_device)):
        found["camera_snap"] = lambda params: camera_snap(ffmpeg, options, params)
    if os.access(WHERE_AM_I, os.X_OK):
        found["location_get"] = lambda params: geoclue_location()
    elif options.location is not None:
        fixed = options.location
        found["location_get"] = lambda params: fixed_location(fixed)
    log.info("node capabilities: %s", ", ".join(sorted(found)) or "none")
    return found


def _text(params: Mapping[str, Any], key: str, limit: int, default: str | None = None) -> str:
    value = params.get(key, default)
    if not isinstance(value, str) or len(value) > limit:
        raise BackendError(ErrorCode.INVALID_FIELD, f"{key} must be a string of <= {limit}")
    return value


async def _run(argv: list[str], timeout_s: float) -> None:
    """Run ``argv``; BackendError command_failed on a non-zero exit, timeout_exceeded."""
    with trio.move_on_after(timeout_s) as scope:
        done = await trio.run_process(
            argv, check=False, stdin=subprocess.DEVNULL, capture_stdout=True, capture_stderr=True
        )
    if scope.cancelled_caught:
        raise BackendError(ErrorCode.TIMEOUT_EXCEEDED, f"{os.path.basename(argv[0])} took too long")
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", "replace").strip()[-_STDERR_CHARS:]
        raise BackendError(ErrorCode.COMMAND_FAILED, f"exit {done.returncode}: {tail}")


async def notify_send(program: str, params: Mapping[str, Any]) -> Capture:
    title = _text(params, "title", 256)
    body = _text(params, "body", 2048, "")
    urgency = _text(params, "urgency", 8, "normal")
    if urgency not in ("low", "normal", "critical"):
        raise BackendError(ErrorCode.INVALID_FIELD, "urgency must be low|normal|critical")
    await _run([program, "-u", urgency, "--", title, body], 10.0)
    return Capture("notified")


async def _capture_file(argv: list[str], suffix: str, timeout_s: float) -> bytes:
    with tempfile.TemporaryDirectory(prefix="csp-node-") as directory:
        path = os.path.join(directory, f"capture{suffix}")
        await _run([*argv, "-y", path], timeout_s)
        return await trio.Path(path).read_bytes()


def _duration(params: Mapping[str, Any], cap_s: float) -> float:
    value = params.get("duration_s", 3)
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not 0 < value <= cap_s or not math.isfinite(value):
        raise BackendError(ErrorCode.INVALID_FIELD, f"duration_s must be in (0, {cap_s:g}]")
    return float(value)


async def screen_record(
    ffmpeg: str, display: str, options: BackendOptions, params: Mapping[str, Any]
) -> Capture:
    """A clip of ``duration_s`` (default 3, at most ``max_record_s``) or, with
    ``format: png``, one screenshot."""
    fmt = _text(params, "format", 8, "mp4")
    grab = [ffmpeg, "-hide_banner", "-loglevel", "error", "-f", "x11grab", "-i", display]
    if fmt == "png":
        return Capture(
            "", media=await _capture_file([*grab, "-frames:v", "1"], ".png", 30), mime="image/png"
        )
    if fmt != "mp4":
        raise BackendError(ErrorCode.INVALID_FIELD, "format must be mp4|png")
    seconds = _duration(params, options.max_record_s)
    encode = ["-t", f"{seconds:g}", "-vf", "scale=trunc(iw/2)*2:trunc(ih/2)*2"]
    encode += ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-f", "mp4"]
    clip = await _capture_file([*grab, *encode], ".mp4", seconds + 30)
    return Capture("", media=clip, mime="video/mp4")


async def camera_snap(ffmpeg: str, options: BackendOptions, params: Mapping[str, Any]) -> Capture:
    """One JPEG frame; ``quality`` 0..1 maps onto ffmpeg's -q:v 31..2. ``facing`` is
    accepted (front|back): a V4L2 host has one configured device, whichever way it faces."""
    quality = params.get("quality", 0.8)
    if not isinstance(quality, int | float) or isinstance(quality, bool) or not 0 <= quality <= 1:
        raise BackendError(ErrorCode.INVALID_FIELD, "quality must be in [0, 1]")
    facing = _text(params, "facing", 8, "back")
    if facing not in ("front", "back"):
        raise BackendError(ErrorCode.INVALID_FIELD, "facing must be front|back")
    if options.camera_source is not None:
        source = ["-f", "lavfi", "-i", options.camera_source]
    else:
        source = ["-f", "v4l2", "-i", options.camera_device]
    q = str(round(31 - quality * 29))
    argv = [ffmpeg, "-hide_banner", "-loglevel", "error", *source, "-frames:v", "1", "-q:v", q]
    return Capture("", media=await _capture_file(argv, ".jpg", 30), mime="image/jpeg")


def _location(lat: float, lon: float, accuracy: float, source: str) -> Capture:
    if not (-90 <= lat <= 90 and -180 <= lon <= 180):
        raise BackendError(ErrorCode.COMMAND_FAILED, "position out of range")
    fields = (("SOURCE", source), ("ACCURACY_M", f"{accuracy:.1f}"))
    return Capture(f"lat:{lat:.6f},lon:{lon:.6f}", fields)


async def fixed_location(fixed: tuple[float, float, float]) -> Capture:
    return _location(*fixed, "fixed")


def geoclue_values(text: str) -> dict[str, float]:
    """Latitude, Longitude and Accuracy as where-am-i printed them (the last of each wins);
    a value that is not an ASCII decimal is left out, never raised."""
    return {key: float(value) for key, value in _GEOCLUE.findall(text)}


async def geoclue_location() -> Capture:
    """GeoClue's demo agent prints Latitude/Longitude/Accuracy lines; the first fix wins."""
    with trio.move_on_after(30):
        done = await trio.run_process(
            [WHERE_AM_I, "-t", "20"], check=False, capture_stdout=True, capture_stderr=True
        )
        text = done.stdout.decode("utf-8", "replace")
        values = geoclue_values(text)
        if "Latitude" in values and "Longitude" in values:
            accuracy = values.get("Accuracy", 0.0)
            return _location(values["Latitude"], values["Longitude"], accuracy, "geoclue")
    raise BackendError(ErrorCode.NOT_AVAILABLE, "GeoClue gave no position")


def work_ms(started: float) -> str:
    return f"{(time.monotonic() - started) * 1000:.3f}"
