"""How long an action waits for a download Chromium announced but has not started yet.

Chromium turns an answered navigation into a download by aborting it (ERR_ABORTED); the
download event follows, by milliseconds on a quiet host and by seconds on a loaded one. These
tests play Playwright's events in that order on small stand-ins (the order is what is under
test, and a real Chromium cannot be made late on demand): an ``attachment`` answer is waited
for within the action's deadline; any other aborted answer (a 204, a replaced navigation) at
most ``_LATE_S``; a download that starts within ``_LATE_S`` after an action is the next
reply's, later ones are refused.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from specialists.browser import downloads
from specialists.browser.downloads import Downloads, Landed

LATE_S = 0.05  # the short wait, shortened so the late download below comes after it


class Request:
    def __init__(self) -> None:
        self.failure: str | None = None

    def is_navigation_request(self) -> bool:
        return True


class Response:
    def __init__(self, request: Request, headers: dict[str, str]) -> None:
        self.request = request
        self.headers = headers


class Download:
    def __init__(self, file: Path) -> None:
        self.url = "https://origin.test/report"
        self.suggested_filename = file.name
        self.file = file

    async def path(self) -> Path:
        return self.file

    async def failure(self) -> None:
        return None

    async def cancel(self) -> None:
        return None

    async def delete(self) -> None:
        return None


class Page:
    """Holds the handlers ``Downloads.watch`` registers, and fires them."""

    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}

    def on(self, event: str, handler: Any) -> None:
        self.handlers[event] = handler

    def fire(self, event: str, value: Any) -> None:
        self.handlers[event](value)


async def an_aborted_navigation_then_a_late_download(
    headers: dict[str, str], file: Path
) -> list[Landed]:
    """Arm, answer a navigation with ``headers``, abort it, end the action, and start its
    download ten short waits later; what the action's settle tells."""
    tracker = Downloads(cap=1000, max_count=3)
    page = Page()
    tracker.watch(page)
    tracker.arm()
    request = Request()
    page.fire("request", request)
    page.fire("response", Response(request, headers))
    request.failure = "net::ERR_ABORTED"
    page.fire("requestfailed", request)
    tracker.disarm()
    assert tracker.pending()
    loop = asyncio.get_running_loop()
    loop.call_later(10 * LATE_S, page.fire, "download", Download(file))
    landed, dropped = await tracker.settle(timeout_s=30)
    assert dropped == 0
    return landed


@pytest.fixture(autouse=True)
def short_late_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(downloads, "_LATE_S", LATE_S)


@pytest.fixture
def report(tmp_path: Path) -> Path:
    file = tmp_path / "report.pdf"
    file.write_bytes(b"%PDF-1.4\n")
    return file


def test_an_attachment_answer_is_waited_for_past_the_short_wait(report: Path) -> None:
    attachment = {"content-disposition": 'attachment; filename="report.pdf"'}
    landed = asyncio.run(an_aborted_navigation_then_a_late_download(attachment, report))
    assert [(one.name, one.size, one.refused) for one in landed] == [("report.pdf", 9, None)]


def test_another_aborted_answer_is_waited_for_only_the_short_wait(report: Path) -> None:
    landed = asyncio.run(an_aborted_navigation_then_a_late_download({}, report))
    assert landed == []


async def a_download_after_an_action(delay_s: float, file: Path) -> list[Landed]:
    """An action that ends, then a download its page starts ``delay_s`` later; what the
    next action's settle tells."""
    tracker = Downloads(cap=1000, max_count=3)
    page = Page()
    tracker.watch(page)
    tracker.arm()
    tracker.disarm()
    await asyncio.sleep(delay_s)
    page.fire("download", Download(file))
    tracker.arm()
    tracker.disarm()
    landed, _ = await tracker.settle(timeout_s=30)
    return landed


def test_a_download_that_starts_just_after_an_action_is_kept_for_the_next_reply(
    report: Path,
) -> None:
    landed = asyncio.run(a_download_after_an_action(0, report))
    assert [(one.name, one.refused) for one in landed] == [("report.pdf", None)]


def test_a_download_that_starts_long_after_an_action_is_refused(report: Path) -> None:
    landed = asyncio.run(a_download_after_an_action(4 * LATE_S, report))
    assert [(one.name, one.refused) for one in landed] == [("report.pdf", "between_actions")]
