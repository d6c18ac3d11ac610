"""The hooks the library calls to record its metrics, bound once to OpenTelemetry or to no-ops.

The library records through the OpenTelemetry metrics API when it can be
imported (the ``redis-mcp-tasks[otel]`` extra): its instruments live on the meter
``redis_tasks`` of the global meter provider, so an application that sets up
OpenTelemetry gets them with its own, and ``redis-tasks worker --metrics-port``
sets one up with a Prometheus reader. Without the API, or with
``REDIS_TASKS_METRICS=off``, every hook is bound once, at import, to a function
that does nothing: ``opentelemetry`` is never imported, and a hook costs one
call of an empty function.

Hooks are attributes of the one :data:`METRICS` object (``METRICS.task_created()``)
rather than module functions, so :meth:`Metrics.enable` can rebind them all at
once (to an explicit meter provider, in the CLI and in tests) while every caller
keeps the reference it took at import.

Attributes are bounded on purpose: a partition number, a primary's host:port, or an
outcome or reason from a closed set; never a task ID, origin, argument, payload, result, message or
tenant (its key or digest). The instruments themselves are in :mod:`.instruments`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final, Protocol

from .hooks import HookSet, wanted

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider

    from redis_tasks._work_queue import QueueDepth

    from .histograms import BucketHistogram
    from .instruments import Recorder

__all__ = ["METRICS", "Gauges", "Metrics"]


class Gauges(Protocol):
    """What a running worker reports to the observable gauges."""

    def running(self) -> int:
        """Handlers running now."""
        ...

    def depths(self) -> Mapping[int, QueueDepth]:
        """The latest sample of each partition's queue depth (may be empty)."""
        ...

    async def refresh(self) -> None:
        """Sample the depths again if the latest sample is older than a few seconds."""
        ...


class Metrics(HookSet):
    """The hooks the library records through (see the module); one instance, :data:`METRICS`."""

    #: A task was created (``create_task`` returned).
    task_created: Callable[[], None]
    #: ``create_task`` raised CapacityError: ``reason`` is quota, rate or full.
    create_refused: Callable[[str], None]
    #: A terminal transition succeeded: ``status`` is completed, failed or cancelled.
    task_ended: Callable[[str], None]
    #: A claim of ``partition``'s entry gave this worker the lease.
    claimed: Callable[[int], None]
    #: ``count`` entries of ``partition`` were taken over from other consumers.
    reclaimed: Callable[[int, int], None]
    #: A claim settled the task instead of running it (``outcome``: cancelled,
    #: poisoned, expired, terminal, or deferred by its tenant's concurrency cap).
    claim_settled: Callable[[str], None]
    #: A lease this worker held was lost.
    lease_lost: Callable[[], None]
    #: A handler asked the client a new round of questions.
    input_round: Callable[[], None]
    #: A task waiting for its client's input was parked (given back by its worker).
    parked: Callable[[], None]
    #: A BackendError was raised.
    redis_error: Callable[[], None]
    #: Seconds from enqueue to handler start.
    pickup: Callable[[float], None]
    #: A handler ended with ``outcome`` after ``seconds``.
    run_ended: Callable[[str, float], None]
    #: Seconds from enqueue to the terminal outcome.
    create_to_terminal: Callable[[float], None]
    #: Primary ``name`` (host:port) lost its last online replica (``True``) or has one
    #: again (``False``), under ``wait_replicas="auto"``.
    replicas_missing: Callable[[str, bool], None]

    HOOKS = (
        "task_created",
        "create_refused",
        "task_ended",
        "claimed",
        "reclaimed",
        "claim_settled",
        "lease_lost",
        "input_round",
        "parked",
        "redis_error",
        "pickup",
        "run_ended",
        "create_to_terminal",
        "replicas_missing",
    )

    def __init__(self) -> None:
        self._gauges: list[Gauges] = []
        self._lock = threading.Lock()  # gauges are read from an exporter's thread
        self._recorder: Recorder | None = None
        super().__init__()

    def disable(self) -> None:
        """Bind every hook to a no-op (and forget the recorder)."""
        super().disable()
        self._recorder = None

    def enable(self, provider: MeterProvider | None = None) -> bool:
        """Record through OpenTelemetry: ``provider``'s meter, or the global provider's.

        Returns ``False`` (hooks left as they were) when the API is not installed.
        """
        try:
            from opentelemetry import metrics as otel

            from .instruments import Recorder
        except ImportError:
            return False
        meter = (provider or otel.get_meter_provider()).get_meter("redis_tasks")
        recorder = Recorder(meter, self._observe_running, self._observe_depths)
        self.bind(recorder)
        self._recorder = recorder
        return True

    def bucket_histograms(self) -> Mapping[str, BucketHistogram]:
        """Keep the bound recorder's three histograms pre-bucketed from now on, for an
        exporter that writes them itself (the Prometheus export does: see
        :mod:`.histograms`), and return them by name; ``{}`` while the hooks are off."""
        return {} if self._recorder is None else self._recorder.bucket_histograms()

    def watch(self, gauges: Gauges) -> Callable[[], None]:
        """Report ``gauges`` (a running worker) until the returned function is called."""
        with self._lock:
            self._gauges.append(gauges)

        def unwatch() -> None:
            with self._lock:
                if gauges in self._gauges:
                    self._gauges.remove(gauges)

        return unwatch

    async def refresh(self) -> None:
        """Bring every watched worker's depth sample up to date (before a scrape)."""
        with self._lock:
            watched = list(self._gauges)
        for gauges in watched:
            await gauges.refresh()

    def _watched(self) -> list[Gauges]:
        with self._lock:
            return list(self._gauges)

    def _observe_running(self) -> int:
        return sum(g.running() for g in self._watched())

    def _observe_depths(self) -> dict[int, QueueDepth]:
        # Two workers of one process reading the same partition report one value.
        merged: dict[int, QueueDepth] = {}
        for gauges in self._watched():
            merged.update(gauges.depths())
        return merged


#: The library's one :class:`Metrics`: OpenTelemetry's when importable, else no-ops.
METRICS: Final = Metrics()
if wanted("REDIS_TASKS_METRICS"):
    METRICS.enable()
