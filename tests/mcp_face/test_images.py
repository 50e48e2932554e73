"""A reply naming a PNG the daemon saved (a browser screenshot, a canvas snapshot) is MCP
image content as well as the path, through the SDK's in-process client; a path that is no
PNG, no regular file, or too large stays a path only."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client
from mcp.types import CallToolResult, ImageContent, TextContent

from csp_web.core.daemon.compose import op_table
from csp_web.mcp_face.images import MAX_IMAGE_BYTES, PNG_SIGNATURE, images_of, read_png
from csp_web.mcp_face.refresh import ToolSet
from csp_web.mcp_face.server import build_server
from csp_web.mcp_face.tools import build_tools
from protocol import Reply, Status, Task
from specialists.browser import BROWSER
from specialists.web import WEB

WAIT_S = 10.0
# A 1x1 transparent PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


class ScriptedDaemon:
    """The daemon's side of the face's calls: each task gets ``reply``."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.tasks: list[Task] = []

    async def call(self, task: Task, *, timeout_s: float = 60.0) -> Reply:
        self.tasks.append(task)
        return self.reply


async def _call(reply: Reply, tool: str, arguments: dict[str, Any]) -> CallToolResult:
    tools = build_tools(
        [op.describe() for op in op_table((BROWSER,))], exec_configured=False, max_timeout_ms=1000
    )
    server = build_server(ScriptedDaemon(reply), ToolSet(tools), max_timeout_ms=1000)
    with trio.fail_after(WAIT_S):
        async with Client(server) as client:
            result = await client.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult)
    return result


def _png(tmp_path: Path, name: str, data: bytes = PNG) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _shot(path: str) -> Reply:
    return Reply(
        Status.OK,
        (
            ("SCOPE", "[browser]"),
            ("DATA", "action:screenshot,url:https://a.test/"),
            ("URL", "https://a.test/"),
            ("SCREENSHOT_BYTES", str(len(PNG))),
            ("SCREENSHOT_REF", path),
        ),
    )


async def test_a_browser_screenshot_is_image_content_beside_its_path(tmp_path: Path) -> None:
    path = _png(tmp_path, "shot.png")
    result = await _call(_shot(path), "tool_browser", {"action": "screenshot"})
    text, image = result.content
    assert isinstance(text, TextContent)
    assert f"SCREENSHOT_REF {path}" in text.text
    assert image == ImageContent(data=base64.b64encode(PNG).decode(), mime_type="image/png")
    assert result.structured_content is not None
    assert result.structured_content["SCREENSHOT_REF"] == path


async def test_a_canvas_snapshot_is_image_content_too(tmp_path: Path) -> None:
    path = _png(tmp_path, "snap.png")
    reply = Reply(
        Status.OK,
        (("SCOPE", "[canvas]"), ("DATA", "action:snapshot,node:main"), ("SNAPSHOT_REF", path)),
    )
    result = await _call(reply, "tool_canvas", {"action": "snapshot"})
    assert [content.type for content in result.content] == ["text", "image"]


@pytest.mark.parametrize(
    "make",
    [
        lambda tmp: _png(tmp, "text.png", b"not a png at all"),
        lambda tmp: str(tmp / "missing.png"),
        lambda tmp: str(tmp),  # a directory
    ],
)
async def test_a_path_that_is_no_png_file_stays_a_path_only(tmp_path: Path, make: Any) -> None:
    result = await _call(_shot(make(tmp_path)), "tool_browser", {"action": "screenshot"})
    assert [content.type for content in result.content] == ["text"]
    assert not result.is_error


def test_a_symlink_is_not_followed(tmp_path: Path) -> None:
    link = tmp_path / "link.png"
    link.symlink_to(_png(tmp_path, "real.png"))
    assert read_png(str(link)) is None


def test_a_png_of_the_cap_is_read_and_one_byte_more_is_not(tmp_path: Path) -> None:
    at_cap = PNG_SIGNATURE + b"\0" * (MAX_IMAGE_BYTES - len(PNG_SIGNATURE))
    assert read_png(_png(tmp_path, "cap.png", at_cap)) == at_cap
    over = _png(tmp_path, "over.png", at_cap + b"\0")
    assert os.path.getsize(over) == MAX_IMAGE_BYTES + 1
    assert read_png(over) is None


def test_a_fifo_is_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.png"
    os.mkfifo(fifo)
    assert read_png(str(fifo)) is None


async def test_every_png_a_repeated_field_names_is_attached(tmp_path: Path) -> None:
    first, second = _png(tmp_path, "a.png"), _png(tmp_path, "b.png")
    declared = ("SCREENSHOT_REF", "SNAPSHOT_REF")
    images = await images_of({"SCREENSHOT_REF": [first, second], "SNAPSHOT_REF": 7}, declared)
    assert [image.data for image in images] == [base64.b64encode(PNG).decode()] * 2


async def test_a_png_field_the_op_does_not_declare_is_not_read(tmp_path: Path) -> None:
    """A relayed reply (a memory sink's, say) could name any file: only an op that declares
    the field gets its path read."""
    path = _png(tmp_path, "shot.png")
    reply = Reply(Status.OK, (("DATA", "x"), ("SCREENSHOT_REF", path)))
    tools = build_tools(
        [op.describe() for op in op_table((WEB,))], exec_configured=False, max_timeout_ms=1000
    )
    server = build_server(ScriptedDaemon(reply), ToolSet(tools), max_timeout_ms=1000)
    with trio.fail_after(WAIT_S):
        async with Client(server) as client:
            result = await client.call_tool("web_cabinet", {"file_key": "fk_aaaaaaaaaaaaaaaa"})
    assert isinstance(result, CallToolResult)
    assert [content.type for content in result.content] == ["text"]
