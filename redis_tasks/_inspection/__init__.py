"""What ``redis-tasks inspect`` and the dashboard show: the state of the work queues
and of one task, as plain values that render as a table or as JSON.

An operator asks how deep the backlog is, what runs, which worker holds which
lease, how long pickup takes and what ended how. Most of that Redis keeps
anyway: a partition's work stream holds one entry per live task (``XLEN``), and
its consumer group the entries delivered and not finished (the pending list,
with each consumer's idle time). What it does not keep the scripts count, in one
small hash per partition (the *stats*: ``created``, the terminal statuses and
:data:`PICKUP_FIELDS`): each create adds one to ``created``, each terminal
transition one to its status, and each first claim one to the bucket of its
pickup time (enqueue to claim, both on the server's clock, so no clock skew),
one ``HINCRBY`` per batch of claims. That is the whole cost on the hot
path (``redis-tasks bench drain``, measured before and after: benchmarks/README.md).

Leases, statuses of running tasks and lease deadlines come from a *sample*: the
oldest ``sample`` pending entries of each partition, each looked up in its task
record by the ``inspect`` script (one atomic, read-only call per partition).
With more entries pending than that, :attr:`PartitionView.sampled` says so.

Nothing here carries a task's origin, payload, answers, result, status message,
endpoint or partition key: a :class:`TaskInspection` has the lease and the
bookkeeping only, and the error of a failed task by its JSON-RPC code alone.

The modules: ``queues.py`` (:class:`Inspection`, every partition and the totals;
:class:`Rates`), ``partition.py`` (:class:`PartitionView`, its consumers and
leases, and the stats hash read), ``pickup.py`` (:class:`PickupHistogram`),
``tenants.py`` (the tenants waiting and running, and ``--tenant-key``'s digests),
``task.py`` (:class:`TaskInspection`, and :class:`TaskMatches`: the tasks a
reference names) and ``text.py`` (the text rendering).

Nor does anything here carry a task's ID but :class:`TaskInspection` and
:class:`TaskMatches`, which an operator asks for by ID or reference: a lease names
its task by reference (``11.Wt0jM9``), so the queues' view, and the dashboard that
serves it, hold no ID (a task ID is a capability).
"""

from redis_tasks._stats import PICKUP_BOUNDS_MS, PICKUP_FIELDS

from .partition import ConsumerView, LeaseView, PartitionView, ended_counts, stats_counts
from .pickup import PickupHistogram, pickup_bucket
from .queues import Inspection, Rates
from .task import TaskInspection, TaskMatches

__all__ = [
    "PICKUP_BOUNDS_MS",
    "PICKUP_FIELDS",
    "ConsumerView",
    "Inspection",
    "LeaseView",
    "PartitionView",
    "PickupHistogram",
    "Rates",
    "TaskInspection",
    "TaskMatches",
    "ended_counts",
    "pickup_bucket",
    "stats_counts",
]
