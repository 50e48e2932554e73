"""csp-web as an MCP server: ``csp-web mcp`` serves the daemon's ops as MCP tools.

- ``tools``: the op table (``REQ:ops``) as tools and their input schemas (SDK-free)
- ``results``: tool arguments as a CSP/1 task, a reply as a tool result (SDK-free)
- ``server``: the SDK's low-level server with tools/list and tools/call
- ``daemon_link``: the daemon reached over its socket (served by our uid) or run in process
- ``owners``: what an HTTP peer of another uid is refused (state the daemon keeps per uid)
- ``asgi``: a trio + h11 HTTP/1.1 server for the SDK's streamable HTTP app
- ``serve``: stdio or HTTP, the ``csp-web mcp`` entry point

See docs/mcp.md.
"""
