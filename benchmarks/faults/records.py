"""The run's settings and constants, its records (calls, faults) and the log counters."""

from __future__ import annotations

import contextlib
import json
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

#: Every fault kind, in the order the schedule injects them (then round again).
KINDS: Final = ("pause_all", "kill", "pause_write", "restart", "pause_write_kill")
#: Worker log events that record an accepted completion (as tests/support/fleet.py counts them).
COMPLETED: Final = ("task_complete", "outcome_unconfirmed")
#: Worker log events of a handler slot not given back exactly once (the rule of
#: redis_tasks._worker.slots.SlotLease; ``slots_leaked`` is checked when a worker stops).
SLOT_BUGS: Final = ("slot_given_twice", "slots_overdrawn", "slots_leaked")
BACKOFF: Final = 0.05  # a client's pause after a failed call: as a real client would
WAKE: Final = 0.05  # longest wait for an event before polling again (lifecycle's bound)
CHUNK: Final = 500  # lookups in flight at once while checking


@dataclass(frozen=True)
class Settings:
    """How long and how hard the run goes, and how faults are spaced (the CLI's options)."""

    seconds: float = 120.0  # the load, faults included
    clients: int = 32
    workers: int = 2
    concurrency: int = 32
    timeout: float = 2.0  # RedisTaskManager.from_url(timeout=...) here and in the workers
    slack: float = 1.0
    # Shorter than the longest pauses, so some leases run out during a fault and their
    # tasks run again: the re-runs the fencing must keep to one completion.
    lease: float = 3.0
    warmup: float = 3.0  # load without faults first
    every: float = 4.0  # seconds between fault starts
    gap: float = 1.0  # at least this long after a fault healed before the next
    recovery: float = 10.0  # load without faults after the last one
    settle: float = 120.0  # bound on waiting for every task to end
    handler_ms: float = 5.0
    ttl: float = 3600.0
    fsync: str = "always"  # the private server's appendfsync

    @property
    def limit(self) -> float:
        """The longest a call may take: its timeout plus the stated slack."""
        return self.timeout + self.slack


@dataclass(slots=True)
class Op:
    """One timed client call."""

    kind: str  # "create" or "find"
    began: float  # seconds since the load started
    seconds: float
    outcome: str  # "ok", "backend_error", "none" (find found nothing), or an exception type


@dataclass
class Fault:
    """One injected fault: what, when it started and when it was over (seconds into the load)."""

    kind: str
    at: float
    healed: float
    pause_ms: int = 0
    how: str = ""  # a restart's signal
    recovered_s: float | None = None  # heal until the first create started after it succeeded


@dataclass
class WorkerLogs:
    """What the workers' JSON logs say, counted."""

    events: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)  # error-level events
    # By task reference (the logs name no task ID: it is a capability) -> fences.
    completions: dict[str, list[int]] = field(default_factory=dict)
    abandoned: set[str] = field(default_factory=set)  # references: a finish given up
    unparsed: int = 0  # lines that are not JSON (a traceback would be)

    def read(self, path: Path) -> None:
        """Add the events of the log at ``path``."""
        with path.open("rb") as lines:
            for raw in lines:
                if b'"event": "task_started"' in raw:  # most lines: no need to parse them
                    self.events["task_started"] += 1
                    continue
                if not raw.startswith(b"{"):
                    self.unparsed += bool(raw.strip())
                    continue
                entry = json.loads(raw)
                event = str(entry.get("event") or f"{entry.get('logger')}:{entry.get('level')}")
                self.events[event] += 1
                if entry.get("level") == "error":
                    self.errors[event] += 1
                task = entry.get("task")
                if event in COMPLETED:
                    self.completions.setdefault(task, []).append(int(entry["fence"]))
                elif event == "finish_abandoned":
                    self.abandoned.add(task)


class LogCounter(logging.Handler):
    """Counts this process's redis-tasks log records by event (or message template).

    The load's manager logs warnings while Redis is away (its event tail retrying);
    counted, they become figures instead of lines between the progress bars. Only the
    template is kept, never the formatted message.
    """

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.counts: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        """Count ``record``."""
        name = str(getattr(record, "event", None) or record.msg)
        self.counts[name] += 1
        if record.levelno >= logging.ERROR:
            self.errors[name] += 1

    @contextlib.contextmanager
    def installed(self) -> Iterator[LogCounter]:
        """Route the ``redis_tasks`` logger here (only) while the block runs."""
        logger = logging.getLogger("redis_tasks")
        saved = logger.handlers[:], logger.propagate, logger.level
        logger.handlers[:] = [self]
        logger.propagate = False
        logger.setLevel(logging.INFO)
        try:
            yield self
        finally:
            logger.handlers[:], logger.propagate = saved[0], saved[1]
            logger.setLevel(saved[2])
