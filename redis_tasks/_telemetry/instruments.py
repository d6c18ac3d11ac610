"""Every instrument redis-tasks records: its name, kind and meaning, and the recorder that
makes them on a meter and records on them.

Counters are kept as plain integers and reported through observable counters:
counting a task is then an integer increment on the worker's hot path, not a
trip through the SDK's measurement pipeline (about 5 us each, measured), and a
counter shows 0 from the first scrape instead of appearing on its first event.
Histograms (three per task: pickup, run, create to terminal) are kept the same
way, pre-bucketed (:mod:`.histograms`), where the library exports them itself;
on an application's own meter provider they go through its SDK.

Imported only when metrics are on; ``opentelemetry`` is imported by
:class:`Recorder` itself, so the table can be read without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from .histograms import BucketHistogram

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Meter, Observation

    from redis_tasks._work_queue import QueueDepth

__all__ = ["INSTRUMENTS", "REFUSALS", "SECONDS_BUCKETS", "SETTLING", "Instrument", "Recorder"]

#: Histogram buckets in seconds, from a sub-millisecond pickup to an hour-long task
#: (OpenTelemetry's default buckets are meant for milliseconds).
SECONDS_BUCKETS: Final = (
    *(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
    *(1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0),
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
        "redis_tasks_creates_refused",
        "counter",
        "{task}",
        ("reason",),
        "Creates refused with nothing stored: a tenant's open-task quota, its create rate, "
        "or no room in Redis (quota, rate, full)",
    ),
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
        "Claims that settled the task instead of running it: cancelled, poisoned, "
        "expired, terminal, or deferred (its tenant at its concurrency cap)",
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
        "redis_tasks_tasks_parked",
        "counter",
        "{task}",
        (),
        "Tasks this worker parked: given back while they waited for their client's input",
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
        "Handler start to end: completed, failed, cancelled, abandoned or parked",
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
        "{task}",
        ("partition",),
        "Tasks no worker has read yet: work entries not delivered and tasks in tenant queues",
    ),
    Instrument(
        "redis_tasks_tenants_waiting",
        "gauge",
        "{tenant}",
        ("partition",),
        "Tenants with tasks waiting in their queues (counted in each partition they wait in)",
    ),
    Instrument(
        "redis_tasks_replicas_missing",
        "gauge",
        "{primary}",
        ("primary",),
        "1 while a primary that had a replica has none online: wait_replicas=auto writes "
        "there are not confirmed by one",
    ),
    Instrument(
        "redis_tasks_pending",
        "gauge",
        "{entry}",
        ("partition",),
        "Work entries delivered to a worker and not finished",
    ),
    Instrument(
        "redis_tasks_waiting_for_input",
        "gauge",
        "{task}",
        ("partition",),
        "Parked tasks: waiting for their client's input, held by no worker",
    ),
)


#: Claim outcomes that settle a task, each reported from the start (0 until it happens).
SETTLING: Final = ("cancelled", "poisoned", "expired", "terminal", "deferred")
#: Why a create was refused (CapacityError.reason), each reported from the start.
REFUSALS: Final = ("quota", "rate", "full")
_ENDINGS: Final = ("completed", "failed", "cancelled")

_Callback = Callable[["CallbackOptions"], Iterable["Observation"]]


class Recorder:
    """The instruments on one meter, and the hooks that record on them (bound to
    :data:`~.metrics.METRICS` by :meth:`~.metrics.Metrics.enable`)."""

    def __init__(
        self,
        meter: Meter,
        running: Callable[[], int],
        depths: Callable[[], dict[int, QueueDepth]],
    ) -> None:
        from opentelemetry.metrics import Observation

        self.created = 0
        self.refused = dict.fromkeys(REFUSALS, 0)
        self.ended = dict.fromkeys(_ENDINGS, 0)
        self.claims: dict[int, int] = {}
        self.reclaims: dict[int, int] = {}
        self.settled = dict.fromkeys(SETTLING, 0)
        self.lease_losses = 0
        self.input_rounds = 0
        self.parks = 0
        self.redis_errors = 0
        self.missing: dict[str, int] = {}

        def total(read: Callable[[], int]) -> _Callback:
            return lambda options: [Observation(read())]

        def by(key: str, read: Callable[[], Mapping[Any, int]]) -> _Callback:
            # A copy first: the event loop may add a key while an exporter thread reads.
            return lambda options: [Observation(n, {key: k}) for k, n in dict(read()).items()]

        def depth(field: str) -> _Callback:
            return lambda options: [
                Observation(getattr(d, field), {"partition": p})
                for p, d in sorted(depths().items())
            ]

        callbacks: dict[str, _Callback] = {
            "redis_tasks_tasks_created": total(lambda: self.created),
            "redis_tasks_creates_refused": by("reason", lambda: self.refused),
            "redis_tasks_tasks_claimed": by("partition", lambda: self.claims),
            "redis_tasks_tasks_reclaimed": by("partition", lambda: self.reclaims),
            "redis_tasks_claims_settled": by("outcome", lambda: self.settled),
            "redis_tasks_lease_losses": total(lambda: self.lease_losses),
            "redis_tasks_input_rounds": total(lambda: self.input_rounds),
            "redis_tasks_tasks_parked": total(lambda: self.parks),
            "redis_tasks_redis_errors": total(lambda: self.redis_errors),
            "redis_tasks_tasks_running": total(running),
            "redis_tasks_backlog": depth("backlog"),
            "redis_tasks_tenants_waiting": depth("tenants"),
            "redis_tasks_pending": depth("pending"),
            "redis_tasks_waiting_for_input": depth("waiting_for_input"),
            "redis_tasks_replicas_missing": by("primary", lambda: self.missing),
        }
        for ending in _ENDINGS:
            callbacks[f"redis_tasks_tasks_{ending}"] = total(
                partial(self.ended.__getitem__, ending)
            )
        #: The pre-bucketed histograms by name (empty until :meth:`bucket_histograms`).
        self.histograms: dict[str, BucketHistogram] = {}
        made: dict[str, Any] = {}
        for spec in INSTRUMENTS:
            if spec.kind == "histogram":
                made[spec.name] = meter.create_histogram(
                    spec.name,
                    spec.unit,
                    spec.description,
                    explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
                )
            else:
                create = (
                    meter.create_observable_counter
                    if spec.kind == "counter"
                    else meter.create_observable_gauge
                )
                create(spec.name, [callbacks[spec.name]], spec.unit, spec.description)
        self._pickup: Callable[[float], None] = made["redis_tasks_pickup_latency"].record
        self._run: Callable[[float, Mapping[str, str]], None] = made[
            "redis_tasks_run_duration"
        ].record
        self._terminal: Callable[[float], None] = made["redis_tasks_create_to_terminal"].record
        # One attribute mapping per outcome, made once: recording allocates none.
        self._outcomes: dict[str, Mapping[str, str]] = {}

    def bucket_histograms(self) -> dict[str, BucketHistogram]:
        """From now on keep the histograms pre-bucketed in :attr:`histograms` (for an
        exporter that writes them itself); the meter's histograms get no more records,
        so they export no points. Returns :attr:`histograms`."""
        if not self.histograms:
            for spec in INSTRUMENTS:
                if spec.kind == "histogram":
                    label = spec.attributes[0] if spec.attributes else None
                    self.histograms[spec.name] = BucketHistogram(spec.name, SECONDS_BUCKETS, label)
            self._pickup = self.histograms["redis_tasks_pickup_latency"].record
            self._terminal = self.histograms["redis_tasks_create_to_terminal"].record
            run = self.histograms["redis_tasks_run_duration"].record
            self._run = lambda seconds, attributes: run(seconds, attributes["outcome"])
        return self.histograms

    def task_created(self) -> None:
        """See :attr:`~.metrics.Metrics.task_created`."""
        self.created += 1

    def create_refused(self, reason: str) -> None:
        """See :attr:`~.metrics.Metrics.create_refused`."""
        if reason in self.refused:
            self.refused[reason] += 1

    def task_ended(self, status: str) -> None:
        """See :attr:`~.metrics.Metrics.task_ended`."""
        if status in self.ended:
            self.ended[status] += 1

    def claimed(self, partition: int) -> None:
        """See :attr:`~.metrics.Metrics.claimed`."""
        self.claims[partition] = self.claims.get(partition, 0) + 1

    def reclaimed(self, partition: int, count: int) -> None:
        """See :attr:`~.metrics.Metrics.reclaimed`."""
        self.reclaims[partition] = self.reclaims.get(partition, 0) + count

    def claim_settled(self, outcome: str) -> None:
        """See :attr:`~.metrics.Metrics.claim_settled`."""
        if outcome in self.settled:
            self.settled[outcome] += 1

    def lease_lost(self) -> None:
        """See :attr:`~.metrics.Metrics.lease_lost`."""
        self.lease_losses += 1

    def input_round(self) -> None:
        """See :attr:`~.metrics.Metrics.input_round`."""
        self.input_rounds += 1

    def parked(self) -> None:
        """See :attr:`~.metrics.Metrics.parked`."""
        self.parks += 1

    def redis_error(self) -> None:
        """See :attr:`~.metrics.Metrics.redis_error`."""
        self.redis_errors += 1

    def pickup(self, seconds: float) -> None:
        """See :attr:`~.metrics.Metrics.pickup`."""
        self._pickup(seconds)

    def run_ended(self, outcome: str, seconds: float) -> None:
        """See :attr:`~.metrics.Metrics.run_ended`."""
        attributes = self._outcomes.get(outcome)
        if attributes is None:
            attributes = self._outcomes[outcome] = {"outcome": outcome}
        self._run(seconds, attributes)

    def create_to_terminal(self, seconds: float) -> None:
        """See :attr:`~.metrics.Metrics.create_to_terminal`."""
        self._terminal(seconds)

    def replicas_missing(self, primary: str, missing: bool) -> None:
        """See :attr:`~.metrics.Metrics.replicas_missing`."""
        self.missing[primary] = 1 if missing else 0
