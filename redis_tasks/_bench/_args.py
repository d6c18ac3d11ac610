"""Argument types of ``redis-tasks bench``'s options: whole numbers, checked at parse time."""

from __future__ import annotations

import argparse

__all__ = ["counts", "positive", "replica_count"]


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
