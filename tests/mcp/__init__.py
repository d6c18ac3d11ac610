"""The MCP tasks extension: its API, end to end over HTTP, the fast path, conformance."""
