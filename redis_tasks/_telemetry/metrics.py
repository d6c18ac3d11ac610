"""Every instrument redis-tasks records, and the hooks the library calls to record.

The library records through the OpenTelemetry metrics API when it can be
imported (the ``redis-tasks[otel]`` extra): its instruments live on the meter
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

Attributes are bounded on purpose: a partition number or an outcome from a
closed set, never a task ID, origin, argument, payload, result or message.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider

    from redis_tasks._work_queue import QueueDepth

__all__ = ["INSTRUMENTS", "METRICS", "SECONDS_BUCKETS", "Gauges", "Instrument", "Metrics"]

#: Histogram buckets in seconds, from a sub-millisecond pickup to an hour-long task
#: (OpenTelemetry's default buckets are meant for milliseconds).
SECONDS_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
)


@dataclass(frozen=True, slots=True)
class Instrument:
    """One instrument: its OpenTelemetry name, kind, unit, attributes and meaning.

    Prometheus shows a counter as ``<name>_total`` and a histogram in seconds as
    ``<name>_seconds_bucket``/``_sum``/``_count``.
    """

    name: str
    kind: str  #: "counter", "histogram" or "gauge" (observable)
    unit: str
    attributes: tuple[str, ...]
    description: str


INSTRUMENTS: Final = (
    Instrument("redis_tasks_tasks_created", "counter", "{task}", (), "Tasks created"),
    Instrument(
        "redis_tasks_tasks_claimed",
        "counter",
        "{task}",
        ("partition",),
        "Claims that gave this worker a lease and started the handler",
    ),
    Instrument(
        "redis_tasks_tasks_reclaimed",
        "counter",
        "{entry}",
        ("partition",),
        "Work entries taken over from a crashed or stalled worker",
    ),
    Instrument("redis_tasks_tasks_completed", "counter", "{task}", (), "Tasks ended completed"),
    Instrument("redis_tasks_tasks_failed", "counter", "{task}", (), "Tasks ended failed"),
    Instrument("redis_tasks_tasks_cancelled", "counter", "{task}", (), "Tasks ended cancelled"),
    Instrument(
        "redis_tasks_claims_settled",
        "counter",
        "{task}",
        ("outcome",),
        "Claims that settled the task instead of running it: "
        "cancelled, poisoned, expired or terminal",
    ),
    Instrument(
        "redis_tasks_lease_losses",
        "counter",
        "{lease}",
        (),
        "Leases this worker lost: fenced by a newer claim, or run out while Redis was unreachable",
    ),
    Instrument(
        "redis_tasks_input_rounds",
        "counter",
        "{round}",
        (),
        "Input requests that asked the client a new round of questions",
    ),
    Instrument(
        "redis_tasks_redis_errors",
        "counter",
        "{error}",
        (),
        "Calls that failed with BackendError (Redis failed, timed out or was unreachable)",
    ),
    Instrument(
        "redis_tasks_pickup_latency",
        "histogram",
        "s",
        (),
        "Enqueue to handler start, for entries read fresh (not reclaimed)",
    ),
    Instrument(
        "redis_tasks_run_duration",
        "histogram",
        "s",
        ("outcome",),
        "Handler start to end: completed, failed, cancelled or abandoned",
    ),
    Instrument(
        "redis_tasks_create_to_terminal",
        "histogram",
        "s",
        (),
        "Enqueue to the terminal outcome this worker wrote",
    ),
    Instrument(
        "redis_tasks_tasks_running", "gauge", "{task}", (), "Handlers running in this process"
    ),
    Instrument(
        "redis_tasks_backlog",
        "gauge",
        "{entry}",
        ("partition",),
        "Work entries no worker has read yet",
    ),
    Instrument(
        "redis_tasks_pending",
        "gauge",
        "{entry}",
        ("partition",),
        "Work entries delivered to a worker and not finished",
    ),
)


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


def _nothing(*args: object) -> None:
    """Every hook while metrics are off."""


#: The hooks, by name; each is rebound as a whole by Metrics.enable/disable.
_HOOKS: Final = (
    "task_created",
    "task_ended",
    "claimed",
    "reclaimed",
    "claim_settled",
    "lease_lost",
    "input_round",
    "redis_error",
    "pickup",
    "run_ended",
    "create_to_terminal",
)


class Metrics:
    """The hooks the library records through (see the module); one instance, :data:`METRICS`."""

    #: A task was created (``create_task`` returned).
    task_created: Callable[[], None]
    #: A terminal transition succeeded: ``status`` is completed, failed or cancelled.
    task_ended: Callable[[str], None]
    #: A claim of ``partition``'s entry gave this worker the lease.
    claimed: Callable[[int], None]
    #: ``count`` entries of ``partition`` were taken over from other consumers.
    reclaimed: Callable[[int, int], None]
    #: A claim settled the task (``outcome``: cancelled, poisoned, expired, terminal).
    claim_settled: Callable[[str], None]
    #: A lease this worker held was lost.
    lease_lost: Callable[[], None]
    #: A handler asked the client a new round of questions.
    input_round: Callable[[], None]
    #: A BackendError was raised.
    redis_error: Callable[[], None]
    #: Seconds from enqueue to handler start.
    pickup: Callable[[float], None]
    #: A handler ended with ``outcome`` after ``seconds``.
    run_ended: Callable[[str, float], None]
    #: Seconds from enqueue to the terminal outcome.
    create_to_terminal: Callable[[float], None]

    def __init__(self) -> None:
        self._gauges: list[Gauges] = []
        self._lock = threading.Lock()  # gauges are read from an exporter's thread
        self.enabled = False
        self.disable()

    def disable(self) -> None:
        """Bind every hook to a no-op."""
        for name in _HOOKS:
            setattr(self, name, _nothing)
        self.enabled = False

    def enable(self, provider: MeterProvider | None = None) -> bool:
        """Record through OpenTelemetry: ``provider``'s meter, or the global provider's.

        Returns ``False`` (hooks left as they were) when the API is not installed.
        """
        try:
            from opentelemetry import metrics as otel
        except ImportError:
            return False
        meter = (provider or otel.get_meter_provider()).get_meter("redis_tasks")
        recorder = _Recorder(meter, self._observe_running, self._observe_depths)
        for name in _HOOKS:
            setattr(self, name, getattr(recorder, name))
        self.enabled = True
        return True

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


class _Recorder:
    """The instruments of one meter, and the hooks that record on them."""

    def __init__(
        self,
        meter: Meter,
        running: Callable[[], int],
        depths: Callable[[], dict[int, QueueDepth]],
    ) -> None:
        from opentelemetry.metrics import Observation

        made: dict[str, Any] = {}
        for spec in INSTRUMENTS:
            if spec.kind == "counter":
                made[spec.name] = meter.create_counter(spec.name, spec.unit, spec.description)
            elif spec.kind == "histogram":
                made[spec.name] = meter.create_histogram(
                    spec.name,
                    spec.unit,
                    spec.description,
                    explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
                )

        def observe_running(options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(running())]

        def observe(field: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
            def callback(options: CallbackOptions) -> Iterable[Observation]:
                return [
                    Observation(getattr(depth, field), {"partition": partition})
                    for partition, depth in sorted(depths().items())
                ]

            return callback

        gauges = {
            "redis_tasks_tasks_running": observe_running,
            "redis_tasks_backlog": observe("backlog"),
            "redis_tasks_pending": observe("pending"),
        }
        for spec in INSTRUMENTS:
            if spec.kind == "gauge":
                meter.create_observable_gauge(
                    spec.name, [gauges[spec.name]], spec.unit, spec.description
                )
        self._created = made["redis_tasks_tasks_created"].add
        self._ended = {
            status: made[f"redis_tasks_tasks_{status}"].add
            for status in ("completed", "failed", "cancelled")
        }
        self._claimed = made["redis_tasks_tasks_claimed"].add
        self._reclaimed = made["redis_tasks_tasks_reclaimed"].add
        self._settled = made["redis_tasks_claims_settled"].add
        self._lease_lost = made["redis_tasks_lease_losses"].add
        self._input_round = made["redis_tasks_input_rounds"].add
        self._redis_error = made["redis_tasks_redis_errors"].add
        self._pickup = made["redis_tasks_pickup_latency"].record
        self._run = made["redis_tasks_run_duration"].record
        self._terminal = made["redis_tasks_create_to_terminal"].record
        # One attribute mapping per partition and per outcome, made once: a hook
        # then allocates nothing for its attributes.
        self._partitions: dict[int, Mapping[str, int]] = {}
        self._outcomes: dict[str, Mapping[str, str]] = {}

    def _partition(self, partition: int) -> Mapping[str, int]:
        attributes = self._partitions.get(partition)
        if attributes is None:
            attributes = self._partitions[partition] = {"partition": partition}
        return attributes

    def _outcome(self, outcome: str) -> Mapping[str, str]:
        attributes = self._outcomes.get(outcome)
        if attributes is None:
            attributes = self._outcomes[outcome] = {"outcome": outcome}
        return attributes

    def task_created(self) -> None:
        """See :attr:`Metrics.task_created`."""
        self._created(1)

    def task_ended(self, status: str) -> None:
        """See :attr:`Metrics.task_ended`."""
        add = self._ended.get(status)
        if add is not None:
            add(1)

    def claimed(self, partition: int) -> None:
        """See :attr:`Metrics.claimed`."""
        self._claimed(1, self._partition(partition))

    def reclaimed(self, partition: int, count: int) -> None:
        """See :attr:`Metrics.reclaimed`."""
        self._reclaimed(count, self._partition(partition))

    def claim_settled(self, outcome: str) -> None:
        """See :attr:`Metrics.claim_settled`."""
        self._settled(1, self._outcome(outcome))

    def lease_lost(self) -> None:
        """See :attr:`Metrics.lease_lost`."""
        self._lease_lost(1)

    def input_round(self) -> None:
        """See :attr:`Metrics.input_round`."""
        self._input_round(1)

    def redis_error(self) -> None:
        """See :attr:`Metrics.redis_error`."""
        self._redis_error(1)

    def pickup(self, seconds: float) -> None:
        """See :attr:`Metrics.pickup`."""
        self._pickup(seconds)

    def run_ended(self, outcome: str, seconds: float) -> None:
        """See :attr:`Metrics.run_ended`."""
        self._run(seconds, self._outcome(outcome))

    def create_to_terminal(self, seconds: float) -> None:
        """See :attr:`Metrics.create_to_terminal`."""
        self._terminal(seconds)


def _wanted() -> bool:
    """Whether to record without being asked: unless ``REDIS_TASKS_METRICS=off``."""
    return os.environ.get("REDIS_TASKS_METRICS", "").strip().lower() not in ("off", "0", "false")


#: The library's one :class:`Metrics`: OpenTelemetry's when importable, else no-ops.
METRICS: Final = Metrics()
if _wanted():
    METRICS.enable()
