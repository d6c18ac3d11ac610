"""The names a bench run gives what it writes, so that whatever it leaves can be found.

A run has an ID, eight random hex digits. Every queue it loads (a redis-tasks key
prefix, or a peer's queue name) is ``rtbench-<run>-<n>``, and every key any system
writes for a queue holds the queue's name (``{rtbench-1a2b3c4d-7:0.406}:task:...``,
``bull:rtbench-1a2b3c4d-3:12``, ...): the SCAN pattern ``*rtbench-1a2b3c4d-*`` finds
all a run wrote, and ``*rtbench-*`` what every run wrote. While a run goes on, a
connection of its own to every primary carries the client name ``rtbench-<run>``, so
another process can tell a live run (leave it alone) from one that was killed
(remove its keys). Runs on a server register in the hash :data:`REGISTRY` (run ID
to who started it), so the next run learns of a killed one without a SCAN.
"""

from __future__ import annotations

import itertools
import re
import secrets
from typing import Final

__all__ = ["ANY_RUN", "NAMESPACE", "REGISTRY", "RunNames", "run_of"]

#: What every bench queue name begins with.
NAMESPACE: Final = "rtbench"
#: The hash of the runs on a server: run ID -> JSON (host, pid, start time). Its name
#: does not match :data:`ANY_RUN` (a colon, not a dash).
REGISTRY: Final = f"{NAMESPACE}:runs"
#: The SCAN pattern of every key any bench run wrote.
ANY_RUN: Final = f"*{NAMESPACE}-*"

_RUN_IN_KEY: Final = re.compile(NAMESPACE.encode() + rb"-([0-9a-f]{8})-")
_RUN_ID: Final = re.compile(r"[0-9a-f]{8}")


def run_of(key: bytes) -> str | None:
    """The run ID in a key's name, or None for a key no bench run wrote."""
    found = _RUN_IN_KEY.search(key)
    return found.group(1).decode() if found else None


class RunNames:
    """One run's ID and the queue names it hands out (fresh for every measurement)."""

    def __init__(self, run_id: str | None = None) -> None:
        if run_id is None:
            run_id = secrets.token_hex(4)
        if not _RUN_ID.fullmatch(run_id):
            raise ValueError("a run ID is eight lowercase hex digits")
        self.run_id = run_id
        self._numbers = itertools.count(1)

    @property
    def label(self) -> str:
        """``rtbench-<run>``: how messages name the run, and its connections' client name."""
        return f"{NAMESPACE}-{self.run_id}"

    @property
    def pattern(self) -> str:
        """The SCAN pattern of every key this run wrote."""
        return f"*{self.label}-*"

    def queue(self) -> str:
        """A fresh queue name (a redis-tasks prefix, or a peer's queue), never reused."""
        return f"{self.label}-{next(self._numbers)}"
