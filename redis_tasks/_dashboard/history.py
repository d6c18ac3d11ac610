"""The dashboard's time series: one point per reading, what changed since the last.

Redis keeps counters (tasks created, terminal transitions, first claims by pickup
time), so a rate needs two readings: each point is the difference between a
reading and the one before it, over the servers' own clocks. A bounded ring of
points (:data:`KEEP`, ten minutes at the default two seconds) is all the page
draws; a new page gets the whole ring at once and then follows along.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Final

from redis_tasks._inspection import Inspection, Rates

__all__ = ["KEEP", "History", "Point"]

#: Points kept (and sent to a new page).
KEEP: Final = 300


@dataclass(frozen=True, slots=True)
class Point:
    """One reading's figures: rates since the previous reading, levels at this one."""

    at_ms: int
    created_per_s: float
    ended_per_s: float
    backlog: int
    pending: int
    pickup_p50_ms: float | None
    pickup_p99_ms: float | None
    claims: int


class History:
    """The latest reading and the last :data:`KEEP` points."""

    def __init__(self, keep: int = KEEP) -> None:
        self._points: deque[Point] = deque(maxlen=keep)
        self.latest: Inspection | None = None

    def add(self, reading: Inspection) -> Point | None:
        """Take a new reading; the point it makes (none for the first)."""
        previous, self.latest = self.latest, reading
        if previous is None:
            return None
        rates = Rates(previous, reading)
        point = Point(
            at_ms=reading.server_ms,
            created_per_s=round(rates.created_per_s, 2),
            ended_per_s=round(rates.ended_per_s, 2),
            backlog=reading.backlog,
            pending=reading.pending,
            pickup_p50_ms=_rounded(rates.pickup_p50),
            pickup_p99_ms=_rounded(rates.pickup_p99),
            claims=rates.claims,
        )
        self._points.append(point)
        return point

    def points(self) -> list[dict[str, Any]]:
        """Every kept point, oldest first, as JSON-ready dicts."""
        return [asdict(p) for p in self._points]


def _rounded(ms: float | None) -> float | None:
    return None if ms is None else round(ms, 2)
