"""The embedded Redis: fakeredis served on a loopback socket, for the demo's default.

When no Redis is given, ``redis-tasks demo`` still runs two MCP servers and two
worker processes; they need a server they can all reach, so fakeredis is served
over TCP from the demo's own process rather than used in-process. Its price: one
Python thread per connection, behind the demo's GIL, and fakeredis's own reading
of each command (the contract suites run on it to catch where that differs).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ._version import install_hint

__all__ = ["embedded_redis"]


@contextmanager
def embedded_redis() -> Iterator[str]:
    """An in-process Redis (fakeredis, with Lua) served on a loopback port; yields its URL.

    Other processes can reach it, so a worker fleet can share it. It is a stand-in
    for trying things out: one Python thread per connection, no persistence, and
    fakeredis's own reading of each command. Needs the ``embedded`` extra.
    """
    try:
        from fakeredis import TcpFakeServer
    except ImportError:
        raise SystemExit(
            f"the embedded Redis needs the 'embedded' extra: {install_hint('embedded')}"
            " (or set REDIS_URL)"
        ) from None
    # Port 0: the kernel picks a free port as it binds, so no other process can take it first.
    server = TcpFakeServer(("127.0.0.1", 0))
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="embedded-redis", daemon=True)
    thread.start()
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.shutdown()
        server.server_close()
