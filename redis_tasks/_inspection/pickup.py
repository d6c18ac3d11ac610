"""Pickup times (enqueue to first claim) as the stats hash counts them: a histogram.

Each first claim adds one to the bucket of its pickup time (both ends on the
server's clock, so no clock skew), one ``HINCRBY`` per batch of claims: the
buckets are :data:`~redis_tasks._stats.PICKUP_BOUNDS_MS`, the last unbounded.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass

from redis_tasks._stats import PICKUP_BOUNDS_MS, PICKUP_FIELDS

__all__ = ["PickupHistogram", "pickup_bucket"]


@dataclass(frozen=True, slots=True)
class PickupHistogram:
    """First claims by pickup time (enqueue to claim): a count per bucket of
    :data:`PICKUP_BOUNDS_MS`, the last one unbounded."""

    counts: tuple[int, ...] = (0,) * len(PICKUP_FIELDS)

    @classmethod
    def from_stats(cls, stats: Mapping[str, int]) -> PickupHistogram:
        """The histogram kept in a partition's stats hash."""
        return cls(tuple(stats.get(name, 0) for name in PICKUP_FIELDS))

    @property
    def total(self) -> int:
        """How many first claims the histogram counts."""
        return sum(self.counts)

    def __add__(self, other: PickupHistogram) -> PickupHistogram:
        return PickupHistogram(tuple(a + b for a, b in zip(self.counts, other.counts, strict=True)))

    def since(self, earlier: PickupHistogram) -> PickupHistogram:
        """The claims counted after ``earlier`` was read (counters never go down;
        a reset, such as a flushed server, reads as the whole of this one)."""
        delta = tuple(a - b for a, b in zip(self.counts, earlier.counts, strict=True))
        return self if any(d < 0 for d in delta) else PickupHistogram(delta)

    def quantile(self, q: float) -> float | None:
        """The ``q``-quantile in ms, interpolated within its bucket; ``None`` when
        empty, and the last bound when it falls in the unbounded bucket."""
        total = self.total
        if total == 0:
            return None
        rank = q * total
        seen = 0
        lower = 0.0
        for i, count in enumerate(self.counts):
            upper = float(PICKUP_BOUNDS_MS[i]) if i < len(PICKUP_BOUNDS_MS) else None
            if count and seen + count >= rank:
                if upper is None:
                    return lower
                return lower + (upper - lower) * max(rank - seen, 0) / count
            seen += count
            if upper is not None:
                lower = upper
        return lower  # pragma: no cover - rank <= total always lands in a bucket


def pickup_bucket(ms: float) -> int:
    """The index of the pickup bucket ``ms`` falls in (as the scripts pick it)."""
    return bisect.bisect_left(PICKUP_BOUNDS_MS, ms)
