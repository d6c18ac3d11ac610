"""Whether a worker is healthy: reading its partitions and keeping its leases.

The rule, checked on demand (by ``/healthz``):

- the worker is running (not starting, not stopping);
- every partition's read loop finished a read (entries or an empty block) within
  the last :meth:`Health.window` seconds, three block periods plus one call's
  deadline; a loop waiting for a free handler slot is busy, not stuck;
- lease renewals have not been failing for longer than a lease (a renewal that
  succeeds, or having nothing left to renew, clears the failure).

Updates are a clock read and a dictionary store, on paths that already wait on
the network: nothing measurable per task.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

__all__ = ["Health", "HealthReport", "WorkerState"]


class WorkerState(Enum):
    """Where a worker is in its life: ``STARTING`` -> ``RUNNING`` -> ``STOPPING`` ->
    ``STOPPED`` (one that stops before it ran goes from ``STARTING`` to ``STOPPING``)."""

    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


#: Where each state may move.
_MOVES: dict[WorkerState, frozenset[WorkerState]] = {
    WorkerState.STARTING: frozenset({WorkerState.RUNNING, WorkerState.STOPPING}),
    WorkerState.RUNNING: frozenset({WorkerState.STOPPING}),
    WorkerState.STOPPING: frozenset({WorkerState.STOPPED}),
    WorkerState.STOPPED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class HealthReport:
    """A health verdict and a short reason (no task data, safe to serve)."""

    ok: bool
    reason: str


class Health:
    """A worker's health state (see the module)."""

    def __init__(self, partitions: Iterable[int], *, block: float, timeout: float, lease: float):
        self._read_at = dict.fromkeys(partitions, 0.0)
        self._waiting: set[int] = set()  # read loops waiting for a free slot
        self._renew_failing_since: float | None = None
        self._window = 3 * block + timeout
        self._lease = lease
        self._state = WorkerState.STARTING

    @property
    def state(self) -> WorkerState:
        """Where the worker is in its life."""
        return self._state

    def _move(self, to: WorkerState) -> None:
        """Enter ``to``; a move off the arrows is a bug: refused."""
        if to not in _MOVES[self._state]:
            raise RuntimeError(f"a worker cannot move from {self._state.value} to {to.value}")
        self._state = to

    @property
    def window(self) -> float:
        """Seconds a read loop may go without finishing a read."""
        return self._window

    def started(self) -> None:
        """The read loops start now."""
        now = time.monotonic()
        for partition in self._read_at:
            self._read_at[partition] = now
        self._move(WorkerState.RUNNING)

    def stopping(self) -> None:
        """The worker stops reading (graceful shutdown); a stop asked again (a second
        signal, :meth:`~.worker.Worker.stop` then the run's own exit) changes nothing."""
        if self._state in (WorkerState.STOPPING, WorkerState.STOPPED):
            return
        self._move(WorkerState.STOPPING)

    def stopped(self) -> None:
        """The worker has stopped: every run ended, its consumers let go."""
        self._move(WorkerState.STOPPED)

    def read_done(self, partition: int) -> None:
        """``partition``'s loop finished a read or a batch claim."""
        self._read_at[partition] = time.monotonic()

    def waiting(self, partition: int, waiting: bool) -> None:
        """``partition``'s loop waits for a free slot (or stopped waiting)."""
        if waiting:
            self._waiting.add(partition)
        else:
            self._waiting.discard(partition)
            self._read_at[partition] = time.monotonic()

    def renewed(self) -> None:
        """A renewal succeeded, or nothing needs renewing."""
        self._renew_failing_since = None

    def renew_failed(self) -> None:
        """A renewal could not reach the backend."""
        if self._renew_failing_since is None:
            self._renew_failing_since = time.monotonic()

    def check(self) -> HealthReport:
        """The verdict now."""
        if self._state is not WorkerState.RUNNING:
            return HealthReport(False, self._state.value)
        now = time.monotonic()
        stale = [
            p
            for p, at in self._read_at.items()
            if p not in self._waiting and now - at > self._window
        ]
        if stale:
            oldest = max(now - self._read_at[p] for p in stale)
            return HealthReport(
                False, f"{len(stale)} partition read loop(s) without a read for {oldest:.1f}s"
            )
        failing = self._renew_failing_since
        if failing is not None and now - failing > self._lease:
            return HealthReport(False, f"lease renewals failing for {now - failing:.1f}s")
        return HealthReport(True, "ok")
