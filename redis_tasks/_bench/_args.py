"""Argument types of ``redis-tasks bench``'s options: whole numbers, checked at parse time."""

from __future__ import annotations

import argparse

__all__ = [
    "DURATIONS",
    "FAIRNESS_PARTS",
    "counts",
    "durations",
    "fairness_parts",
    "non_negative",
    "positive",
    "replica_count",
]


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("give a whole number") from None


def positive(text: str) -> int:
    """A whole number of at least 1."""
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def non_negative(text: str) -> int:
    """A whole number of at least 0."""
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


#: The ``fairness`` scenario's measurements, in the order a round takes them.
FAIRNESS_PARTS = ("fair", "fifo", "tenants", "weights")


def fairness_parts(text: str) -> tuple[str, ...]:
    """Comma-separated measurements of the ``fairness`` scenario, like ``fair,fifo``."""
    parts = tuple(part.strip() for part in text.split(","))
    unknown = [part for part in parts if part not in FAIRNESS_PARTS]
    if unknown or not parts:
        raise argparse.ArgumentTypeError(f"give some of {','.join(FAIRNESS_PARTS)}")
    return tuple(part for part in FAIRNESS_PARTS if part in parts)


#: How the fairness scenario's tool durations are drawn, each of mean D: all D; uniform
#: in [D / 2, 3 D / 2]; exponential.
DURATIONS = ("fixed", "uniform", "exponential")


def durations(text: str) -> str:
    """One of :data:`DURATIONS`."""
    if text not in DURATIONS:
        raise argparse.ArgumentTypeError(f"give one of {','.join(DURATIONS)}")
    return text


def replica_count(text: str) -> int:
    """Replicas per primary: 0 to 5."""
    value = _whole(text)
    if not 0 <= value <= 5:
        raise argparse.ArgumentTypeError("must be 0 to 5")
    return value


def counts(text: str) -> tuple[int, ...]:
    """Comma-separated counts of at least 1, like ``1,2,4``."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("give counts like 1,2,4") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("counts must be >= 1")
    return values
