"""The stats hash: the fields of the counters a partition's scripts keep.

Each partition has one small hash of counters (``{tag}:stats``) that the scripts
update in the same atomic step as the change they count, and that ``redis-tasks
inspect`` and the dashboard read (:mod:`redis_tasks._inspection`). Its fields are
named here once; the scripts get them as generated constants
(``redis_tasks/_redis/lua_source.py``), so Python and Lua cannot disagree.
"""

from __future__ import annotations

from typing import Final

from ._status import TERMINAL_STATUSES, TaskStatus

__all__ = [
    "CLAIM_FIELD_PREFIX",
    "CREATED_FIELD",
    "DEFERRED_FIELD",
    "PICKUP_BOUNDS_MS",
    "PICKUP_FIELDS",
    "QUEUED_FIELD",
    "REFUSALS_KEPT_MS",
    "REFUSED_FIELDS",
    "TERMINAL_FIELDS",
]

#: Upper bounds (ms, inclusive) of the pickup histogram's buckets; one more bucket
#: holds everything slower. Pickup runs from a task's creation to its first claim.
PICKUP_BOUNDS_MS: Final = (
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000,
)  # fmt: skip
#: The stats hash's field of each pickup bucket, in bucket order.
PICKUP_FIELDS: Final = (*(f"pickup:{ms}" for ms in PICKUP_BOUNDS_MS), "pickup:inf")
#: Tasks created.
CREATED_FIELD: Final = "created"
#: The terminal statuses, counted under their own names.
TERMINAL_FIELDS: Final = tuple(s.value for s in TaskStatus if s in TERMINAL_STATUSES)
#: Tasks waiting in the partition's tenant queues (dispatched ones leave it).
QUEUED_FIELD: Final = "queued"
#: Claims deferred because the task's tenant was at its concurrency cap.
DEFERRED_FIELD: Final = "deferred"
#: Before a consumer's name: that worker's last batch claim in the partition (the
#: call's token, then the entry and task ID of each task it leased), so that a retry
#: of the call after its reply was lost is answered with them (``lua/claim_next.lua``).
#: Not a count: readers of the counts skip it.
CLAIM_FIELD_PREFIX: Final = "claim:"
#: Creates refused, by reason: the tenant's open-task quota, its create rate.
REFUSED_FIELDS: Final = {"quota": "refused:quota", "rate": "refused:rate"}
#: How long a tenant's own refusal counts last after its latest refusal, ms (its
#: ``refused`` key, read by ``redis-tasks tenants``).
REFUSALS_KEPT_MS: Final = 24 * 3600 * 1000
