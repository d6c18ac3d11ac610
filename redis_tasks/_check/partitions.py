"""How a prefix's partitions fall on a cluster's primaries, and the count that spreads them.

Each partition's keys live in one slot (its hash tag), so each partition is served by
one primary, and with the load spread over the partitions a primary serves its share
of them. The busiest primary caps the cluster: 16 partitions fall 6/5/5 on 3 equal
primaries, so the cluster does 16 / 6 = 2.67x what one of them does, however fast the
other two are. A count whose tags fall evenly lifts the cap: 32 fall 11/11/10 (2.91x).

The tags are fixed per partition (:meth:`redis_tasks._redis.keys.KeySpace.tag`: they do
not depend on the count), so raising the count keeps every existing task's partition
and key where they are, and a worker with the new count serves the old partitions
too. Lowering it would leave the tasks of the partitions dropped unserved: the
suggestion only ever raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from redis.crc import key_slot

from redis_tasks._ids import MAX_PARTITIONS
from redis_tasks._redis.keys import KeySpace

from .nodes import ClusterNode
from .report import Finding

__all__ = ["partition_finding", "spread"]

#: A count is even enough when its cap is within this of the number of primaries.
_EVEN: Final = 0.95
#: The highest count suggested: each partition costs every worker a reader.
_MOST: Final = 256


def spread(primaries: Sequence[ClusterNode], keys: KeySpace, partitions: int) -> list[int]:
    """How many of ``partitions`` each of ``primaries`` serves (in their order)."""
    counts = [0] * len(primaries)
    for partition in range(partitions):
        slot = key_slot(keys.tag(partition).encode())
        for index, node in enumerate(primaries):
            if any(first <= slot <= last for first, last in node.slots):
                counts[index] += 1
                break
    return counts


def _cap(counts: list[int], partitions: int) -> float:
    """What the cluster does, in primaries' worth, when the busiest one is full."""
    busiest = max(counts)
    return partitions / busiest if busiest else 0.0


def partition_finding(nodes: Sequence[ClusterNode], prefix: str, partitions: int) -> Finding:
    """Whether ``partitions`` fall evenly on the cluster's serving primaries, and the
    smallest higher count that does when they do not."""
    primaries = sorted((n for n in nodes if n.primary and n.slots), key=lambda n: n.slots[0])
    keys = KeySpace(prefix)
    counts = spread(primaries, keys, partitions)
    cap = _cap(counts, partitions)
    split = "/".join(map(str, counts))
    data: dict[str, object] = {
        "partitions": partitions,
        "per_primary": {n.name: c for n, c in zip(primaries, counts, strict=True)},
        "cap": round(cap, 2),
    }
    target = _EVEN * len(primaries)
    if len(primaries) <= 1 or cap >= target:
        return Finding(
            "ok",
            "partitions",
            f"{partitions} partitions fall {split} on {len(primaries)} primaries "
            f"(the busiest caps the cluster at {cap:.2f}x one primary)",
            data=data,
        )
    better = None
    for count in range(partitions + 1, min(_MOST, MAX_PARTITIONS) + 1):
        if _cap(spread(primaries, keys, count), count) >= target:
            better = count
            break
    fix = (
        f"set partitions={better} on every worker of the prefix first (redis-tasks worker "
        f"--partitions {better}), then on every manager and server; only raise it: existing "
        "tasks keep their partitions, which the higher count still serves"
        if better is not None
        else "add primaries or move slots so that the partitions' slots spread evenly"
    )
    data["suggested"] = better
    return Finding(
        "warn",
        "partitions",
        f"{partitions} partitions fall {split} on {len(primaries)} primaries: the busiest "
        f"caps the cluster at {cap:.2f}x one primary, of {len(primaries)}",
        fix,
        data=data,
    )
