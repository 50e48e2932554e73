"""The MCP section of the configuration: strict loading, names and bounds."""

from __future__ import annotations

import re
from typing import Any

import pytest

from csp_web.config import ConfigError
from csp_web.config.load import load_section
from specialists.tool.mcp.config import HttpServerConfig, McpConfig, StdioServerConfig


def test_mapping_with_command_or_url_builds_the_matching_server_kinds() -> None:
    config = load_section(
        McpConfig,
        {
            "call_timeout_s": 10,
            "servers": {
                "filesystem": {
                    "command": "npx",
                    "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv"],
                    "env_from": {"TOKEN": "CSP_FS_TOKEN"},
                    "cwd": "/srv",
                },
                "search": {
                    "url": "https://mcp.example/mcp",
                    "headers_from_env": {"Authorization": "CSP_SEARCH_AUTH"},
                },
            },
        },
        "mcp",
    )
    assert config.call_timeout_s == 10
    assert config.servers["filesystem"] == StdioServerConfig(
        command="npx",
        args=("-y", "@modelcontextprotocol/server-filesystem", "/srv"),
        env_from={"TOKEN": "CSP_FS_TOKEN"},
        cwd="/srv",
    )
    assert isinstance(config.servers["search"], HttpServerConfig)


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"call_timeout": 3}, "mcp.call_timeout: unknown key"),
        ({"servers": {"fs": {"command": "x", "agrs": []}}}, "mcp.servers.fs.agrs: unknown key"),
        ({"servers": {"fs": {"command": "x", "url": "http://h"}}}, "mcp.servers.fs: must be"),
        ({"servers": {"fs": {}}}, "mcp.servers.fs: must be"),
        (
            {"servers": {"fs": {"command": "x", "args": "-y"}}},
            "mcp.servers.fs.args: expected a list",
        ),
        ({"servers": {"fs": {"url": "ftp://h"}}}, "mcp.servers.fs.url: must be"),
        ({"servers": {"Bad Name": {"command": "x"}}}, "mcp.servers.Bad Name: name must"),
        (
            {"servers": {"fs": {"command": "x", "env_from": {"A": "not a var"}}}},
            "mcp.servers.fs.env_from.A",
        ),
        ({"start_timeout_s": 0}, "mcp.start_timeout_s: must be positive"),
        ({"start_timeout_s": "20"}, "mcp.start_timeout_s: expected float"),
        ({"servers": []}, "mcp.servers: expected a mapping"),
        ({"max_text_chars": 2000.5}, "mcp.max_text_chars: expected int"),
    ],
)
def test_bad_entry_is_an_error_naming_its_path(raw: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError, match="^" + re.escape(path)):
        load_section(McpConfig, raw, "mcp")


def test_configs_are_frozen_including_their_mappings() -> None:
    server = StdioServerConfig(command="x", env={"A": "1"})
    with pytest.raises(TypeError):
        server.env["B"] = "2"  # type: ignore[index]
    with pytest.raises(TypeError):
        McpConfig(servers={"x": server}).servers["y"] = server  # type: ignore[index]


def test_http_server_has_no_literal_headers_only_variable_names() -> None:
    with pytest.raises(ConfigError, match=re.escape("headers_from_env.Authorization")):
        HttpServerConfig(url="https://h/mcp", headers_from_env={"Authorization": "Bearer abc"})
