"""Tool results and tool listings as reply parts (DATA and extra fields), every part capped.

Pure functions over the SDK's result models: no I/O, no clock. Text is made safe for a CSP/1
line here (lone surrogates, which no UTF-8 peer can read, become U+FFFD); quoting is the
serializer's job.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp.types import (
    BlobResourceContents,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ResourceLink,
    TextContent,
    Tool,
)

from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import (
    MAX_JSON_DEPTH,
    holds_lone_surrogate,
    json_depth,
    unique_keys,
)
from protocol import ErrorCode
from specialists.tool.mcp.config import McpConfig

from .errors import cap, tool_error

_SURROGATE = re.compile(r"[\ud800-\udfff]")
_MAX_TOOL_NAME = 128  # SEP-986's upper bound on a tool name


@dataclass(frozen=True, slots=True, kw_only=True)
class McpResult:
    """One successful tool call, as ``STATUS OK / SCOPE [server] / DATA ... / EXEC_TIME``.

    ``data`` is the tool's text (its text blocks joined by newlines, other blocks as short
    ``[kind ...]`` notes), cut to ``max_text_chars``; ``text_chars`` is the uncut length.
    ``structured_json`` is the structured content as compact JSON with sorted keys, or None
    when there was none or it passed ``max_structured_chars`` (then ``structured_chars`` > 0).
    """

    server: str
    tool: str
    data: str
    text_chars: int
    structured_json: str | None
    structured_chars: int
    exec_time_ms: int

    @property
    def scope(self) -> tuple[str, ...]:
        """The reply's SCOPE: the server, as the seed's ``SCOPE [filesystem]``."""
        return (self.server,)

    @property
    def truncated(self) -> bool:
        """Whether DATA holds less than the tool's whole text."""
        return self.text_chars > len(self.data)

    def fields(self) -> tuple[tuple[str, str], ...]:
        """The reply lines after DATA, in order: EXEC_TIME, then STRUCTURED and TEXT_CHARS."""
        lines = [("EXEC_TIME", str(self.exec_time_ms))]
        if self.structured_json is not None:
            lines.append(("STRUCTURED", self.structured_json))
        elif self.structured_chars:
            lines.append(("STRUCTURED_CHARS", str(self.structured_chars)))
        if self.truncated:
            lines.append(("TEXT_CHARS", str(self.text_chars)))
        return tuple(lines)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolInfo:
    """One tool a server offers: its name, description and JSON Schema for arguments."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolList:
    """A server's tools, as ``DATA tools:<n>`` and one ``TOOL <json>`` line per tool."""

    server: str
    tools: tuple[ToolInfo, ...]
    exec_time_ms: int

    @property
    def scope(self) -> tuple[str, ...]:
        """The reply's SCOPE: the server."""
        return (self.server,)

    @property
    def data(self) -> str:
        """The DATA line: how many tools the server offers."""
        return f"tools:{len(self.tools)}"

    def fields(self, config: McpConfig) -> tuple[tuple[str, str], ...]:
        """EXEC_TIME, then each tool (up to ``max_listed_tools``) as one compact JSON line.

        A line is ``{"description":..,"input_schema":..,"name":..}``; a schema longer than
        ``max_schema_chars`` is replaced by ``"schema_chars": <length>`` so the frame keeps
        within CSP/1's field and byte budgets. TOOLS_LISTED appears when the list was cut.
        """
        lines = [("EXEC_TIME", str(self.exec_time_ms))]
        listed = self.tools[: config.max_listed_tools]
        lines.extend(("TOOL", _tool_line(tool, config)) for tool in listed)
        if len(listed) < len(self.tools):
            lines.append(("TOOLS_LISTED", str(len(listed))))
        return tuple(lines)


def parse_params(text: str | None) -> dict[str, Any]:
    """The PARAMS field's JSON object; an absent field means no arguments (``{}``).

    This is the one place wire text becomes arguments: ``McpPool.call_tool`` takes the dict.
    Raises OpError(INVALID_FIELD, "PARAMS") for text that is not one JSON object
    (arrays, scalars, NaN/Infinity, a repeated key, nesting past ``MAX_JSON_DEPTH``, a lone
    surrogate).
    """
    if text is None:
        return {}
    if (
        json_depth(text) > MAX_JSON_DEPTH
    ):  # the bound every JSON field has (csp_web.core.api.fields)
        raise _invalid_params()
    try:
        value = json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=unique_keys)
    except (ValueError, RecursionError):  # a repeated key too (``unique_keys``)
        raise _invalid_params() from None
    if holds_lone_surrogate(text, value):  # V-2: no UTF-8 peer reads it (the JSON fields' rule)
        raise _invalid_params()
    return check_params(value)


def check_params(value: object) -> dict[str, Any]:
    """``value`` as tool arguments if it is a JSON object; else OpError(INVALID_FIELD)."""
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise _invalid_params()
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        raise _invalid_params() from None
    return dict(value)


def check_tool(name: str) -> str:
    """``name`` if it can be a tool name; else OpError(INVALID_FIELD, "TOOL").

    SEP-986 says a name SHOULD be 1 to 128 characters of ``[A-Za-z0-9._-]``; we hold callers
    only to the length and to printable, space-free text, so older servers stay callable.
    """
    if not 1 <= len(name) <= _MAX_TOOL_NAME or not name.isprintable() or " " in name:
        raise OpError(ErrorCode.INVALID_FIELD, "TOOL", scope=("mcp",))
    return name


def build_result(
    server: str, tool: str, result: CallToolResult, *, exec_time_ms: int, config: McpConfig
) -> McpResult:
    """The reply parts of ``result``; an error result raises OpError(MCP_TOOL_ERROR, tool)."""
    text = _join_content(result.content)
    if result.is_error:
        raise tool_error(
            server, tool, text, max_chars=config.max_error_chars, exec_time_ms=exec_time_ms
        )
    structured = _compact_json(result.structured_content)
    if not result.content and structured is not None:
        text = structured  # a tool that answers only in structure still says something in DATA
    fits = structured is not None and len(structured) <= config.max_structured_chars
    return McpResult(
        server=server,
        tool=tool,
        data=cap(text, config.max_text_chars),
        text_chars=len(text),
        structured_json=structured if fits else None,
        structured_chars=len(structured or ""),
        exec_time_ms=exec_time_ms,
    )


def build_tool_info(tool: Tool) -> ToolInfo:
    """The listing entry of one SDK ``Tool``."""
    return ToolInfo(
        name=safe_text(tool.name),
        description=safe_text(tool.description or ""),
        input_schema=tool.input_schema,
    )


def safe_text(text: str) -> str:
    """``text`` with lone surrogates replaced, so it encodes as UTF-8 on a CSP/1 line."""
    return _SURROGATE.sub("\ufffd", text)


def _join_content(blocks: list[ContentBlock]) -> str:
    return safe_text("\n".join(_block_text(block) for block in blocks))


def _block_text(block: ContentBlock) -> str:
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ResourceLink):
        return f"[resource_link {block.uri}]"
    if isinstance(block, EmbeddedResource):
        inner = block.resource
        if isinstance(inner, BlobResourceContents):
            return f"[resource {inner.uri} {inner.mime_type or ''} {_b64_bytes(inner.blob)} bytes]"
        return inner.text
    # Image and audio blocks: base64 media that no text line should carry.
    return f"[{block.type} {block.mime_type} {_b64_bytes(block.data)} bytes]"


def _b64_bytes(data: str) -> int:
    return len(data) * 3 // 4


def _compact_json(value: object) -> str | None:
    if value is None:
        return None
    try:
        text = json.dumps(
            value, separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError):
        return None
    return safe_text(text)


def _tool_line(tool: ToolInfo, config: McpConfig) -> str:
    entry: dict[str, Any] = {
        "name": tool.name,
        "description": cap(tool.description, config.max_description_chars),
    }
    schema = _compact_json(tool.input_schema) or "{}"
    if len(schema) <= config.max_schema_chars:
        entry["input_schema"] = tool.input_schema
    else:
        entry["schema_chars"] = len(schema)
    return _compact_json(entry) or "{}"


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _invalid_params() -> OpError:
    return OpError(ErrorCode.INVALID_FIELD, "PARAMS", scope=("mcp",))
