"""Tools from the op table: one per op outside IN:SYS, input schemas from the field specs
(the same ``describe()`` entries REQ:ops prints and docs/ops.md renders)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from csp_web.core.api.fields import FRAME_FIELDS
from csp_web.core.daemon.compose import op_table
from csp_web.mcp_face.daemon_link import open_daemon_link
from csp_web.mcp_face.tools import ToolTableError, build_tools, parse_op_table, tool_spec
from protocol import Reply, Status, Task
from specialists.tool import TOOL
from specialists.web import WEB

from .conftest import WAIT_S, WebDaemon

MAX_MS = 600_000


def entries() -> list[dict[str, Any]]:
    return [op.describe() for op in op_table((WEB, TOOL))]


def entry(req: str) -> dict[str, Any]:
    (found,) = [e for e in entries() if e["req"] == req]
    return found


def test_every_op_but_the_sys_ops_and_unconfigured_exec_is_a_tool() -> None:
    tools = build_tools(entries(), exec_configured=False, max_timeout_ms=MAX_MS)
    names = [t.name for t in tools]
    expected = sorted(
        f"{e['in'].lower()}_{e['req']}" for e in entries() if e["in"] in ("WEB", "TOOL")
    )
    assert names == expected
    assert {"web_fetch", "tool_cron"} <= set(names)


def test_exec_is_a_tool_only_when_the_daemon_has_it_configured() -> None:
    tools = build_tools(entries(), exec_configured=True, max_timeout_ms=MAX_MS)
    assert "shell_exec" in [t.name for t in tools]
    with pytest.raises(ToolTableError, match="no tool named shell_exec"):
        build_tools(
            entries(), selected=["shell_exec"], exec_configured=False, max_timeout_ms=MAX_MS
        )


def test_selection_exposes_only_the_named_tools_in_the_order_given() -> None:
    tools = build_tools(
        entries(), selected=["web_search", "web_fetch"], exec_configured=False, max_timeout_ms=1
    )
    assert [t.name for t in tools] == ["web_search", "web_fetch"]


def test_selecting_an_unknown_or_internal_tool_is_an_error_naming_it() -> None:
    with pytest.raises(ToolTableError, match="no tool named sys_ping"):
        build_tools(entries(), selected=["sys_ping"], exec_configured=True, max_timeout_ms=1)


def test_fetch_schema_carries_types_bounds_choices_defaults_and_docs() -> None:
    tool = tool_spec(entry("fetch"), max_timeout_ms=MAX_MS)
    assert (tool.req, tool.domain, tool.out) == ("fetch", "WEB", "CONTENT")
    assert tool.description == (
        "Pages' readable content with fileKeys, paged by START/MAX_CHARS; PAGE_TYPE when the"
        " extractor can tell (article forum docs listing product collection service)."
        " CSP/1: REQ:fetch IN:WEB."
    )
    assert tool.input_schema == {
        "type": "object",
        "properties": {
            "url": {
                "type": "string",
                "description": "an https URL (inline text fills it); repeat for several, at most "
                "docs.max_urls (5), loaded concurrently",
            },
            "file_key": {
                "type": "string",
                "description": "a fileKey from an earlier fetch, instead of URL",
            },
            "extract": {"type": "string", "enum": ["text", "json", "html"], "default": "text"},
            "max_chars": {
                "type": "integer",
                "minimum": 1,
                "description": "default fetch.default_max_chars (8000), at most "
                "fetch.max_chars_cap",
            },
            "start": {
                "type": "integer",
                "minimum": 0,
                "default": 0,
                "description": "character offset to read from",
            },
            "max_pages": {
                "type": "integer",
                "minimum": 1,
                "description": "a PDF's pages read: default fetch.max_pages (100), at most"
                " fetch.max_pages_cap (1000)",
            },
            "no_cache": {
                "type": "boolean",
                "default": False,
                "description": "download; the page cache is neither read nor written",
            },
            "max_age": {
                "type": "integer",
                "minimum": 0,
                "description": "seconds: read the cache only when its snapshot is younger"
                " (0: download)",
            },
            "render": {
                "type": "string",
                "enum": ["auto", "never", "always"],
                "description": "run the page's JavaScript in Chromium: auto (an app shell),"
                " never, always; default web.fetch.render (auto)",
            },
            "board": {
                "type": "boolean",
                "default": False,
                "description": "add the announcement board (FILE)",
            },
            "urls": {
                "type": "array",
                "items": {"type": "string"},
                "description": "several url values, sent after url",
            },
            "timeout_ms": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_MS,
                "description": "the task's deadline in milliseconds (default: the daemon's)",
            },
            "budget": {
                "type": "string",
                "maxLength": 256,
                "description": FRAME_FIELDS[3].spec.doc,
            },
            "budget_id": {
                "type": "string",
                "maxLength": 64,
                "description": FRAME_FIELDS[4].spec.doc,
            },
        },
        "additionalProperties": False,
    }


def test_a_repeatable_field_is_an_array_and_a_json_field_an_object() -> None:
    properties = tool_spec(entry("api"), max_timeout_ms=MAX_MS).input_schema["properties"]
    assert properties["headers"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": "one Name:value per line; no credentials or Host",
    }
    assert properties["payload"] == {
        "type": "object",
        "description": "JSON request body (not with GET)",
    }
    assert properties["endpoint"]["maxLength"] == 2048


def test_an_op_declaring_its_own_timeout_keeps_its_bounds() -> None:
    properties = tool_spec(entry("exec"), max_timeout_ms=5).input_schema["properties"]
    assert properties["timeout_ms"] == {"type": "integer", "minimum": 1, "maximum": 600_000}


def test_the_op_table_is_read_from_an_ops_reply() -> None:
    reply = Reply(
        Status.OK,
        (("SCOPE", "sys"), ("DATA", "ops:1"), ("OP", '{"req":"fetch","in":"WEB","out":"CONTENT"}')),
    )
    assert parse_op_table(reply) == [{"req": "fetch", "in": "WEB", "out": "CONTENT"}]


@pytest.mark.parametrize(
    "fields",
    [
        (("ERROR", "busy:web"),),
        (("OP", "not json"),),
        (("OP", '{"req":"fetch"}'),),
    ],
)
def test_a_reply_that_is_no_op_table_is_an_error(fields: tuple[tuple[str, str], ...]) -> None:
    status = Status.FAIL if fields[0][0] == "ERROR" else Status.OK
    with pytest.raises(ToolTableError):
        parse_op_table(Reply(status, fields))


async def test_the_op_table_on_the_wire_lists_each_ops_reply_fields(web_daemon: WebDaemon) -> None:
    """D-5: an OP line carries the op's reply fields: name, whether every reply carries it,
    when it is sent otherwise, and what it means (fetch's PAGE_TYPE, CITE, RETRY_AFTER)."""
    with trio.fail_after(WAIT_S):
        async with open_daemon_link(web_daemon.socket_path) as link:
            reply = await link.call(Task("ops", "SYS", "OPS"))
    assert reply.status is Status.OK
    (fetch,) = [json.loads(line) for line in reply.get_all("OP") if '"req":"fetch"' in line]
    replies = {field["name"]: field for field in fetch["replies"]}
    assert replies["PAGE_TYPE"] == {
        "name": "PAGE_TYPE",
        "always": False,
        "when": "one HTML page the extractor can tell (R-7)",
        "doc": "article forum docs listing product collection service",
    }
    assert replies["CITE"] == {
        "name": "CITE",
        "always": False,
        "when": "per page",
        "doc": "the page (R-4)",
        "repeat": True,
    }
    assert replies["WORD_COUNT"] == {
        "name": "WORD_COUNT",
        "always": False,
        "when": "one page",
        "doc": "words in the readable content",
        "type": "int",
    }
    assert fetch["effects"] == {
        "read_only": True,
        "destructive": False,
        "idempotent": True,
        "open_world": True,
    }
    assert {"TITLE", "WORD_COUNT", "NEXT_START", "RETRY_AFTER"} <= replies.keys()
    assert not {"STATUS", "ID", "SCOPE", "DATA", "ERROR"} & replies.keys()
    (ops,) = [json.loads(line) for line in reply.get_all("OP") if '"req":"ops"' in line]
    assert ops["replies"] == [
        {
            "name": "OP",
            "always": False,
            "when": "one per op",
            "doc": "the op as JSON: req, in, out, inline, fields, replies, doc",
            "repeat": True,
        }
    ]


def test_an_always_sent_reply_field_says_so_without_a_condition() -> None:
    """D-5: ``always`` true and no ``when``; a conditional field has ``when``."""
    assert entry("save")["replies"][:2] == [
        {"name": "FILE_KEY", "always": True, "doc": "the key saved"},
        {"name": "PATH", "always": False, "when": "OK", "doc": "its path in the Memory Specialist"},
    ]
    schema = tool_spec(entry("save"), max_timeout_ms=MAX_MS).output_schema
    assert schema is not None
    assert schema["properties"]["FILE_KEY"]["description"] == "the key saved (always)"


def test_a_tools_output_schema_lists_its_ops_reply_fields_with_their_docs() -> None:
    schema = tool_spec(entry("fetch"), max_timeout_ms=MAX_MS).output_schema
    assert schema is not None
    properties = schema["properties"]
    assert schema["required"] == ["STATUS"]
    assert "additionalProperties" not in schema  # a field added later never fails a client
    assert properties["STATUS"] == {"type": "string", "enum": ["OK", "PARTIAL", "FAIL"]}
    assert properties["PAGE_TYPE"] == {
        "type": "string",
        "description": "article forum docs listing product collection service "
        "(when: one HTML page the extractor can tell (R-7))",
    }
    assert properties["CITE"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": "the page (R-4) (when: per page)",
    }
    assert properties["WORD_COUNT"] == {
        "type": "integer",
        "description": "words in the readable content (when: one page)",
    }
    assert properties["CACHED"]["type"] == "boolean"
    assert properties["FETCH_ERROR"]["type"] == "array"
    assert set(properties) == {"STATUS", "SCOPE", "DATA", "ERROR", "BUDGET_LEFT"} | {
        field["name"] for field in entry("fetch")["replies"]
    }


def test_the_search_tools_schemas_show_the_hit_fields_and_filters() -> None:
    """Issue 27: a hit's date, excerpts, icon, language and sources are in the output schema,
    the filters and ranking fields in the input schema."""
    spec = tool_spec(entry("search"), max_timeout_ms=MAX_MS)
    assert spec.output_schema is not None
    outputs = spec.output_schema["properties"]
    assert {"PUBLISHED", "EXTRA_SNIPPET", "FAVICON", "LANG", "SOURCES"} <= set(outputs)
    assert outputs["PUBLISHED"]["description"].startswith("<url> <UTC ISO-8601 date")
    assert "published:<json>" in outputs["HIT"]["description"]
    inputs = spec.input_schema["properties"]
    assert (inputs["site"]["type"], inputs["sites"]["type"]) == ("string", "array")
    assert (inputs["query"]["type"], inputs["queries"]["type"]) == ("string", "array")
    assert spec.input_schema["required"] == ["query"]
    assert inputs["vertical"]["enum"] == ["web", "news", "images", "videos"]
    assert inputs["mode"]["enum"] == ["fallback", "fuse"]
    assert {"exclude_site", "after", "before", "undated", "country", "lang"} <= set(inputs)
    assert "max_per_domain" in inputs


@pytest.mark.parametrize(
    "entry",
    [
        {"req": "fetch", "in": "WEB", "out": "X", "fields": [{"name": "U", "type": "float"}]},
        {"req": "fetch", "in": "WEB", "out": "X", "fields": [{"type": "text"}]},
        {"req": "fetch", "in": "WEB", "out": "X", "fields": "URL"},
        {"req": "fetch", "in": 7, "out": "X"},
        {"req": "fetch", "in": "WEB", "out": "X", "replies": [{"doc": "no name"}]},
    ],
)
def test_an_op_entry_this_face_cannot_read_is_a_tool_table_error_naming_the_op(
    entry: dict[str, object],
) -> None:
    """A daemon of another version may describe an op in a way this face does not know (a
    field type it has no schema for, say). Before, that was a KeyError, TypeError or
    AttributeError: a traceback at start, and at a refresh the face's end (refresh.py)."""
    with pytest.raises(ToolTableError) as raised:
        build_tools([entry], exec_configured=False, max_timeout_ms=1000)
    assert str(raised.value).startswith(f"op fetch IN:{entry['in']} cannot be read (")


def test_a_plural_another_field_holds_leaves_the_repeatable_field_one_array() -> None:
    fields = [
        {"name": "URL", "type": "text", "repeat": True},
        {"name": "URLS", "type": "text"},
        {"name": "KEY", "type": "text", "repeat": True},
    ]
    spec = tool_spec({"req": "x", "in": "WEB", "out": "X", "fields": fields}, max_timeout_ms=1)
    properties = spec.input_schema["properties"]
    assert (properties["url"]["type"], properties["urls"]["type"]) == ("array", "string")
    assert properties["keys"]["type"] == "array"  # a vowel before the y: keys, not kies
    assert spec.lists == frozenset({"url", "keys"})


def test_an_op_without_effects_has_no_annotations_and_an_unknown_reply_type_is_text() -> None:
    """A daemon older than the effects, or newer with a reply type this face does not know."""
    older = {
        "req": "x",
        "in": "WEB",
        "out": "X",
        "replies": [{"name": "N", "always": True, "type": "decimal128"}],
    }
    spec = tool_spec(older, max_timeout_ms=1)
    assert spec.annotations is None
    assert spec.output_schema is not None
    assert spec.output_schema["properties"]["N"]["type"] == "string"
    assert tool_spec(entry("fetch"), max_timeout_ms=1).annotations == {
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": True,
    }
