"""An MCP server over stdio written as raw JSON-RPC lines, for what the SDK's server would
never send: ``garble`` writes a line that is not UTF-8 before its answer."""

from __future__ import annotations

import json
import sys

TOOLS = [
    {
        "name": "garble",
        "description": "stray bytes, then an answer",
        "inputSchema": {"type": "object"},
    }
]


def send(message: dict[str, object]) -> None:
    sys.stdout.buffer.write(json.dumps(message).encode() + b"\n")
    sys.stdout.buffer.flush()


def answer(request: dict[str, object]) -> dict[str, object] | None:
    method, params = request.get("method"), request.get("params")
    if method == "initialize" and isinstance(params, dict):
        info = {"name": "raw", "version": "1"}
        version = params.get("protocolVersion")
        return {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        sys.stdout.buffer.write(b"\xff\xfe not utf-8\n")
        return {"content": [{"type": "text", "text": "clean"}]}
    if method == "ping":
        return {}
    return None


def main() -> None:
    for line in sys.stdin.buffer:
        request = json.loads(line)
        if "id" not in request:
            continue  # a notification
        result = answer(request)
        if result is None:  # server/discover among them: the client falls back to initialize
            error = {"code": -32601, "message": "Method not found"}
            send({"jsonrpc": "2.0", "id": request["id"], "error": error})
        else:
            send({"jsonrpc": "2.0", "id": request["id"], "result": result})


if __name__ == "__main__":
    main()
