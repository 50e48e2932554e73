"""Every frame the two seed documents show, as wire bytes paired with the frame they stand for.

The seeds are /work/shared/seeds/000_277a83919222ca48.txt (web specialist) and
002_9069d814c1247a47.txt (tool specialist). Lines are copied as written there, with each
``a|b|c`` alternative narrowed to one value and each ``<placeholder>`` filled in; the seed's
annotations ``(past day/week/month - optional)`` and ``(if applicable)`` are dropped. Seed 000
stores its redirect arrow double-encoded (``â†’``); the intended character, U+2192, is kept.
Every wire frame is canonical: it ends with its blank line and ``serialize(frame)`` writes it
byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol import Frame, Reply, Status, Task


@dataclass(frozen=True)
class Sample:
    """One seed frame: a short name for test ids, its wire bytes and its parsed frame."""

    name: str
    wire: bytes
    frame: Frame


def _wire(*lines: str) -> bytes:
    """The LF-terminated frame holding ``lines``, closed by its blank line."""
    return "".join(f"{line}\n" for line in lines).encode("utf-8") + b"\n"


def _task(
    req: str, domain: str, out: str, *fields: tuple[str, str], inline: str | None = None
) -> Task:
    return Task(req, domain, out, inline, tuple(fields))


def _reply(status: Status, *fields: tuple[str, str]) -> Reply:
    return Reply(status, tuple(fields))


REQUESTS: tuple[Sample, ...] = (
    # Seed 000, web specialist.
    Sample(
        "web-input-protocol",
        _wire("TASK REQ:search graphiti memory graph IN:WEB OUT:URL_REFS"),
        _task("search", "WEB", "URL_REFS", inline="graphiti memory graph"),
    ),
    Sample(
        "search-input",
        _wire(
            "TASK REQ:search IN:WEB OUT:URL_REFS",
            'QUERY "neo4j graph database python"',
            "MAX_RESULTS 5",
            "FRESHNESS pw",
        ),
        _task(
            "search",
            "WEB",
            "URL_REFS",
            ("QUERY", "neo4j graph database python"),
            ("MAX_RESULTS", "5"),
            ("FRESHNESS", "pw"),
        ),
    ),
    Sample(
        "fetch-input",
        _wire(
            "TASK REQ:fetch IN:WEB OUT:CONTENT",
            "URL https://example.com/article",
            "EXTRACT text",
            "MAX_CHARS 5000",
        ),
        _task(
            "fetch",
            "WEB",
            "CONTENT",
            ("URL", "https://example.com/article"),
            ("EXTRACT", "text"),
            ("MAX_CHARS", "5000"),
        ),
    ),
    Sample(
        "api-input",
        _wire(
            "TASK REQ:api IN:WEB OUT:API_RESPONSE",
            "ENDPOINT github:repos/user/repo",
            "METHOD GET",
            'PAYLOAD {"ref": "main", "per_page": 5}',
            "HEADERS Accept:application/vnd.github+json",
        ),
        _task(
            "api",
            "WEB",
            "API_RESPONSE",
            ("ENDPOINT", "github:repos/user/repo"),
            ("METHOD", "GET"),
            ("PAYLOAD", '{"ref": "main", "per_page": 5}'),
            ("HEADERS", "Accept:application/vnd.github+json"),
        ),
    ),
    Sample(
        "resolve-input",
        _wire("TASK REQ:resolve IN:WEB OUT:URL", "URL https://t.co/shortlink"),
        _task("resolve", "WEB", "URL", ("URL", "https://t.co/shortlink")),
    ),
    # Seed 002, tool specialist.
    Sample(
        "tool-input-protocol",
        _wire("TASK REQ:exec npm test IN:SHELL OUT:EXEC_RESULT"),
        _task("exec", "SHELL", "EXEC_RESULT", inline="npm test"),
    ),
    Sample(
        "exec-input",
        _wire(
            "TASK REQ:exec IN:SHELL OUT:EXEC_RESULT",
            'COMMAND "npm test"',
            "TIMEOUT_MS 30000",
            "WORKING_DIR /path/to/project",
        ),
        _task(
            "exec",
            "SHELL",
            "EXEC_RESULT",
            ("COMMAND", "npm test"),
            ("TIMEOUT_MS", "30000"),
            ("WORKING_DIR", "/path/to/project"),
        ),
    ),
    Sample(
        "browser-input",
        _wire(
            "TASK REQ:browser IN:TOOL OUT:BROWSER_RESULT",
            "ACTION type",
            "TARGET_URL https://example.com",
            "SELECTOR css:.class",
            'VALUE "hello world"',
        ),
        _task(
            "browser",
            "TOOL",
            "BROWSER_RESULT",
            ("ACTION", "type"),
            ("TARGET_URL", "https://example.com"),
            ("SELECTOR", "css:.class"),
            ("VALUE", "hello world"),
        ),
    ),
    Sample(
        "canvas-input",
        _wire(
            "TASK REQ:canvas IN:TOOL OUT:CANVAS_RESULT",
            "ACTION present",
            "URL https://dashboard.example.com",
            "WIDTH 1920",
            "HEIGHT 1080",
        ),
        _task(
            "canvas",
            "TOOL",
            "CANVAS_RESULT",
            ("ACTION", "present"),
            ("URL", "https://dashboard.example.com"),
            ("WIDTH", "1920"),
            ("HEIGHT", "1080"),
        ),
    ),
    Sample(
        "cron-input",
        _wire(
            "TASK REQ:cron IN:TOOL OUT:CRON_RESULT",
            "ACTION add",
            "JOB_ID memory-daily-sweep",
            'SCHEDULE "0 3 * * *"',
            'TASK_DESCRIPTION "Memory maintenance"',
        ),
        _task(
            "cron",
            "TOOL",
            "CRON_RESULT",
            ("ACTION", "add"),
            ("JOB_ID", "memory-daily-sweep"),
            ("SCHEDULE", "0 3 * * *"),
            ("TASK_DESCRIPTION", "Memory maintenance"),
        ),
    ),
    Sample(
        "node-input",
        _wire(
            "TASK REQ:node IN:TOOL OUT:NODE_RESULT",
            "ACTION camera_snap",
            "NODE iphone-talas",
            'PARAMS {"facing": "back", "quality": 0.8}',
        ),
        _task(
            "node",
            "TOOL",
            "NODE_RESULT",
            ("ACTION", "camera_snap"),
            ("NODE", "iphone-talas"),
            ("PARAMS", '{"facing": "back", "quality": 0.8}'),
        ),
    ),
    Sample(
        "mcp-input",
        _wire(
            "TASK REQ:mcp IN:TOOL OUT:MCP_RESULT",
            "SERVER filesystem",
            "TOOL read_file",
            'PARAMS {"path": "src/index.ts"}',
        ),
        _task(
            "mcp",
            "TOOL",
            "MCP_RESULT",
            ("SERVER", "filesystem"),
            ("TOOL", "read_file"),
            ("PARAMS", '{"path": "src/index.ts"}'),
        ),
    ),
)

REPLIES: tuple[Sample, ...] = (
    # Seed 000, web specialist.
    Sample(
        "web-output-protocol",
        _wire(
            "STATUS PARTIAL",
            "SCOPE [neo4j.com]",
            "DATA url:https://neo4j.com/docs/",
            'SNIPPET neo4j.com:"Neo4j documentation: drivers, Cypher and operations..."',
        ),
        _reply(
            Status.PARTIAL,
            ("SCOPE", "[neo4j.com]"),
            ("DATA", "url:https://neo4j.com/docs/"),
            ("SNIPPET", 'neo4j.com:"Neo4j documentation: drivers, Cypher and operations..."'),
        ),
    ),
    Sample(
        "search-output",
        _wire(
            "STATUS OK",
            "SCOPE [neo4j.com,github.com,stackoverflow.com]",
            "DATA url:https://neo4j.com/docs/,url:https://github.com/neo4j/neo4j-python-driver",
            'SNIPPET neo4j.com:"Official Neo4j Python driver documentation..."',
            'SNIPPET github.com:"Neo4j Python Driver - Bolt protocol implementation..."',
        ),
        _reply(
            Status.OK,
            ("SCOPE", "[neo4j.com,github.com,stackoverflow.com]"),
            (
                "DATA",
                "url:https://neo4j.com/docs/,url:https://github.com/neo4j/neo4j-python-driver",
            ),
            ("SNIPPET", 'neo4j.com:"Official Neo4j Python driver documentation..."'),
            ("SNIPPET", 'github.com:"Neo4j Python Driver - Bolt protocol implementation..."'),
        ),
    ),
    Sample(
        "fetch-output",
        _wire(
            "STATUS OK",
            "SCOPE [example.com]",
            "DATA # Article Title. Readable text of the article, as Markdown.",
            'TITLE "Article Title"',
            "WORD_COUNT 1234",
        ),
        _reply(
            Status.OK,
            ("SCOPE", "[example.com]"),
            ("DATA", "# Article Title. Readable text of the article, as Markdown."),
            ("TITLE", "Article Title"),
            ("WORD_COUNT", "1234"),
        ),
    ),
    Sample(
        "api-output",
        _wire(
            "STATUS OK",
            "SCOPE [github.com]",
            "DATA repo:user/repo,stars:42,open_issues:3",
            "STATUS_CODE 200",
        ),
        _reply(
            Status.OK,
            ("SCOPE", "[github.com]"),
            ("DATA", "repo:user/repo,stars:42,open_issues:3"),
            ("STATUS_CODE", "200"),
        ),
    ),
    Sample(
        "resolve-output",
        _wire(
            "STATUS OK",
            "DATA url:https://example.com/full-article",
            "REDIRECT_CHAIN https://t.co/shortlink→https://bit.ly/xyz→https://example.com/full-article",
        ),
        _reply(
            Status.OK,
            ("DATA", "url:https://example.com/full-article"),
            (
                "REDIRECT_CHAIN",
                "https://t.co/shortlink\u2192https://bit.ly/xyz\u2192https://example.com/full-article",
            ),
        ),
    ),
    Sample(
        "search-failed",
        _wire(
            "STATUS FAIL",
            "SCOPE []",
            "DATA none",
            "ERROR search_api_error:rate_limit_exceeded",
        ),
        _reply(
            Status.FAIL,
            ("SCOPE", "[]"),
            ("DATA", "none"),
            ("ERROR", "search_api_error:rate_limit_exceeded"),
        ),
    ),
    Sample(
        "fetch-failed",
        _wire(
            "STATUS FAIL",
            "SCOPE []",
            "DATA none",
            "ERROR fetch_failed:timeout",
            "URL https://slow-site.com",
        ),
        _reply(
            Status.FAIL,
            ("SCOPE", "[]"),
            ("DATA", "none"),
            ("ERROR", "fetch_failed:timeout"),
            ("URL", "https://slow-site.com"),
        ),
    ),
    Sample(
        "api-error",
        _wire(
            "STATUS FAIL",
            "SCOPE []",
            "DATA none",
            "ERROR api_error:401_unauthorized",
            "ENDPOINT github:repos/private/repo",
        ),
        _reply(
            Status.FAIL,
            ("SCOPE", "[]"),
            ("DATA", "none"),
            ("ERROR", "api_error:401_unauthorized"),
            ("ENDPOINT", "github:repos/private/repo"),
        ),
    ),
    # Seed 002, tool specialist.
    Sample(
        "tool-output-protocol",
        _wire(
            "STATUS OK",
            "SCOPE [git]",
            "DATA output:working tree clean",
            "EXEC_TIME 87",
        ),
        _reply(
            Status.OK,
            ("SCOPE", "[git]"),
            ("DATA", "output:working tree clean"),
            ("EXEC_TIME", "87"),
        ),
    ),
    Sample(
        "exec-output",
        _wire(
            "STATUS OK",
            "SCOPE [npm]",
            "DATA exit:0",
            "EXEC_TIME 2345",
            'STDOUT_SUMMARY "19 tests passed"',
            'STDERR_SUMMARY ""',
        ),
        _reply(
            Status.OK,
            ("SCOPE", "[npm]"),
            ("DATA", "exit:0"),
            ("EXEC_TIME", "2345"),
            ("STDOUT_SUMMARY", "19 tests passed"),
            ("STDERR_SUMMARY", ""),
        ),
    ),
    Sample(
        "browser-output",
        _wire(
            "STATUS OK",
            "SCOPE [browser]",
            "DATA action:navigate,url:https://example.com",
            "EXEC_TIME 1234",
            "SCREENSHOT_REF /tmp/screenshot-uuid.png",
        ),
        _reply(
            Status.OK,
            ("SCOPE", "[browser]"),
            ("DATA", "action:navigate,url:https://example.com"),
            ("EXEC_TIME", "1234"),
            ("SCREENSHOT_REF", "/tmp/screenshot-uuid.png"),
        ),
    ),
    Sample(
        "canvas-output",
        _wire(
            "STATUS OK",
            "SCOPE [canvas]",
            "DATA action:present,node:main",
            "SNAPSHOT_REF /tmp/canvas-uuid.png",
        ),
        _reply(
            Status.OK,
            ("SCOPE", "[canvas]"),
            ("DATA", "action:present,node:main"),
            ("SNAPSHOT_REF", "/tmp/canvas-uuid.png"),
        ),
    ),
    Sample(
        "cron-output",
        _wire(
            "STATUS OK",
            "SCOPE [cron]",
            "DATA jobs:5,active:3,disabled:2",
            "JOB_ADDED memory-daily-sweep",
        ),
        _reply(
            Status.OK,
            ("SCOPE", "[cron]"),
            ("DATA", "jobs:5,active:3,disabled:2"),
            ("JOB_ADDED", "memory-daily-sweep"),
        ),
    ),
    Sample(
        "node-output",
        _wire(
            "STATUS OK",
            "SCOPE [node]",
            "DATA media:/path/to/capture.jpg",
            "NODE iphone-talas",
            "EXEC_TIME 456",
        ),
        _reply(
            Status.OK,
            ("SCOPE", "[node]"),
            ("DATA", "media:/path/to/capture.jpg"),
            ("NODE", "iphone-talas"),
            ("EXEC_TIME", "456"),
        ),
    ),
    Sample(
        "mcp-output",
        _wire(
            "STATUS OK",
            "SCOPE [filesystem]",
            "DATA read 42 lines from src/index.ts",
            "EXEC_TIME 123",
        ),
        _reply(
            Status.OK,
            ("SCOPE", "[filesystem]"),
            ("DATA", "read 42 lines from src/index.ts"),
            ("EXEC_TIME", "123"),
        ),
    ),
    Sample(
        "command-failed",
        _wire(
            "STATUS FAIL",
            "SCOPE [shell]",
            "DATA exit:1",
            "ERROR command_failed:npm test",
            "STDERR_SUMMARY \"Error: Cannot find module 'jest'\"",
        ),
        _reply(
            Status.FAIL,
            ("SCOPE", "[shell]"),
            ("DATA", "exit:1"),
            ("ERROR", "command_failed:npm test"),
            ("STDERR_SUMMARY", "Error: Cannot find module 'jest'"),
        ),
    ),
    Sample(
        "timeout-exceeded",
        _wire(
            "STATUS FAIL",
            "SCOPE [shell]",
            "DATA exit:null",
            "ERROR timeout_exceeded:30000ms",
            'COMMAND "npm run build"',
        ),
        _reply(
            Status.FAIL,
            ("SCOPE", "[shell]"),
            ("DATA", "exit:null"),
            ("ERROR", "timeout_exceeded:30000ms"),
            ("COMMAND", "npm run build"),
        ),
    ),
    Sample(
        "permission-denied",
        _wire(
            "STATUS FAIL",
            "SCOPE [shell]",
            "DATA exit:126",
            "ERROR permission_denied:/usr/local/bin/restricted",
        ),
        _reply(
            Status.FAIL,
            ("SCOPE", "[shell]"),
            ("DATA", "exit:126"),
            ("ERROR", "permission_denied:/usr/local/bin/restricted"),
        ),
    ),
    Sample(
        "mcp-unavailable",
        _wire(
            "STATUS FAIL",
            "SCOPE [mcp]",
            "DATA none",
            "ERROR mcp_unavailable:playwright-server",
        ),
        _reply(
            Status.FAIL,
            ("SCOPE", "[mcp]"),
            ("DATA", "none"),
            ("ERROR", "mcp_unavailable:playwright-server"),
        ),
    ),
)

SAMPLES: tuple[Sample, ...] = REQUESTS + REPLIES


def sample_id(sample: Sample) -> str:
    """The pytest id of a parametrized sample."""
    return sample.name
