"""How much a bench run holds on the server at once, and whether the server has room.

The scenarios run one after another and each removes its keys when it ends, so what
a run holds at once is its largest scenario's: that scenario's tasks times what one
task takes, plus a queue's own keys. What one task takes was measured (redis-server
7.0, ``DBSIZE`` and ``used_memory`` before and after 20,000 tasks under a bench queue
name, ``rtbench-<run>-<n>``):

- a benchmark task of redis-tasks (a 31-byte origin, no payload) is 2 keys (its
  record and its grant) and about 550 bytes queued, 670 once completed with its
  result: :data:`TASK_BYTES`;
- the ``memory`` scenario's largest case (a 400-byte origin, a 256-byte payload)
  about 1,280 bytes queued; an ``mcp`` task carries a whole tool call:
  :data:`LARGE_TASK_BYTES`;
- a peer's queued job is at most arq's 860 bytes (``benchmarks/results.json``):
  :data:`PEER_JOB_BYTES`;
- a queue's own keys (each partition's streams and counters) and the scripts the
  first queue loads: :data:`QUEUE_KEYS`, :data:`QUEUE_BYTES`.

The estimate is checked against the free ``maxmemory`` headroom of every primary
(a cluster's tasks spread over its primaries by partition: the fullest primary gets
at most ``ceil(16 / primaries)`` of the 16 partitions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from ._bench_base import MEMORY_WARM, Settings
from ._mcp_settings import McpSettings
from ._probe import MemoryLimit

__all__ = [
    "KEYS_PER_TASK",
    "LARGE_TASK_BYTES",
    "PEER_JOB_BYTES",
    "QUEUE_BYTES",
    "QUEUE_KEYS",
    "TASK_BYTES",
    "Footprint",
    "footprint",
    "size",
]

#: Keys per task: its record and its grant.
KEYS_PER_TASK: Final = 2
#: Bytes per benchmark task of redis-tasks, queued or completed, stream entries included.
TASK_BYTES: Final = 700
#: Bytes per task of the memory scenario's largest case, and per ``mcp`` task.
LARGE_TASK_BYTES: Final = 1_300
#: Bytes per queued job of the peer that keeps the most.
PEER_JOB_BYTES: Final = 900
#: A queue's own keys: 16 partitions' work and event streams and counters, and tenants'.
QUEUE_KEYS: Final = 64
#: A queue's own bytes: its streams' first nodes, and the scripts the first queue loads.
QUEUE_BYTES: Final = 512 * 1024
_PARTITIONS: Final = 16  # the scenarios' managers keep the default


@dataclass(frozen=True)
class Footprint:
    """The most a run holds at once: keys, bytes, and the scenario that holds it."""

    keys: int
    bytes: int
    scenario: str

    def too_large_for(self, limits: list[MemoryLimit]) -> str | None:
        """Why the server has no room for this (the numbers), or None if it has.

        No room: the fullest primary's share would take more than half of the free
        headroom under its ``maxmemory``. A primary without ``maxmemory`` (0) is not
        checked: nothing to compare with.
        """
        share = math.ceil(_PARTITIONS / len(limits)) / _PARTITIONS if len(limits) > 1 else 1.0
        need = round(self.bytes * share)
        for limit in limits:
            if limit.maxmemory == 0:
                continue
            free = max(0, limit.maxmemory - limit.used)
            if need > free / 2:
                where = f" on the primary {limit.node}" if len(limits) > 1 else ""
                return (
                    f"about {size(need)} is more than half of the {size(free)} free under "
                    f"maxmemory{where} (maxmemory {size(limit.maxmemory)}, "
                    f"{size(limit.used)} used)"
                )
        return None


def size(count: int) -> str:
    """``count`` bytes for a person: ``512 KiB``, ``13.4 MiB``, ``1.2 GiB``."""
    if count < 1024 * 1024:
        return f"{count / 1024:.0f} KiB"
    if count < 1024**3:
        return f"{count / 1024**2:.1f} MiB"
    return f"{count / 1024**3:.1f} GiB"


def footprint(
    settings: Settings, scenarios: tuple[str, ...], mcp: McpSettings, *, peers: bool
) -> Footprint:
    """What the largest of ``scenarios`` holds at once with these sizes (``peers``: peer
    queues run the drain, pickup and memory scenarios too)."""
    job = max(TASK_BYTES, PEER_JOB_BYTES) if peers else TASK_BYTES
    fairness = max(
        settings.fair_tasks + settings.fair_late,
        settings.fair_tenants * settings.fair_tenant_tasks,
        2 * settings.fair_weighted_tasks,
    )
    # Tasks held at once, and bytes each, per scenario.
    held = {
        "limit": (settings.limit_requests + 1, TASK_BYTES),  # redis-benchmark's creates
        "drain": (settings.tasks, job),
        "pickup": (settings.pickups, job),
        "lifecycle": (settings.lifecycle_tasks, TASK_BYTES),
        "find": (settings.pollers, TASK_BYTES),
        "notify": (settings.notifies, TASK_BYTES),
        "memory": (settings.memory_tasks + MEMORY_WARM, LARGE_TASK_BYTES),
        "mcp": (mcp.tasks, LARGE_TASK_BYTES),
        "fairness": (fairness, TASK_BYTES),
        # A parked task keeps its requests too (a second hash): twice a task, at most.
        "parking": (settings.park_tasks + 2 * settings.park_late, 2 * TASK_BYTES),
    }
    rows = [
        Footprint(tasks * KEYS_PER_TASK + QUEUE_KEYS, tasks * each + QUEUE_BYTES, name)
        for name, (tasks, each) in held.items()
        if name in scenarios
    ]
    return max(rows, key=lambda row: row.bytes, default=Footprint(0, 0, ""))
