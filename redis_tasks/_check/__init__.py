"""``redis-tasks check``: whether a Redis an operator runs is ready for the library.

:func:`check` asks the server (every primary of a cluster) what the library
depends on and returns a :class:`Report` of findings, each with its fix:
the server and its version, slot coverage and failing nodes on a cluster, the
eviction policy, memory headroom, persistence, replicas, the connected user's
rights on keys under the prefix (:data:`ACL_COMMANDS`), the Lua scripts, and
the PING round trip.
"""

from __future__ import annotations

from .acl import ACL_COMMANDS
from .report import Finding, Report
from .run import PINGS, Unreachable, check

__all__ = ["ACL_COMMANDS", "PINGS", "Finding", "Report", "Unreachable", "check"]
