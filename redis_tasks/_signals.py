"""What a partition's signal stream says, and of which kind.

The signal stream (``{tag}:signals``) carries two kinds of news for workers, one
task ID each: a *change* a running task's worker must see at once (a cancellation
asked, answers accepted, an outcome written by another caller), and a *newcomer*:
the task of a tenant that joined a ring where others wait, which a busy worker
starts at its next free slot (``claim_next``'s ``first``). A newcomer's signal is
its task ID behind :data:`NEWCOMER_MARK` (no task ID holds it); a change's is the
bare ID. Told apart only by whether the worker ran the task, every change to a task
running elsewhere was taken for a newcomer, and every other worker of its partition
spent a slot's claim on a task it could not start.

A leaf: it imports nothing of the library (the Lua scripts get the mark as the
constant ``SIGNAL_NEWCOMER``).
"""

from __future__ import annotations

from typing import Final, NamedTuple

__all__ = ["NEWCOMER_MARK", "Signal", "newcomer_signal", "read_signal"]

#: What a newcomer's signal puts before its task ID.
NEWCOMER_MARK: Final = "+"


class Signal(NamedTuple):
    """One signal, read: its task ID and whether it names a newcomer's task."""

    task_id: str
    newcomer: bool


def newcomer_signal(task_id: str) -> str:
    """The signal of a newcomer's task ``task_id``."""
    return NEWCOMER_MARK + task_id


def read_signal(text: str) -> Signal:
    """A signal as its stream carried it (a change's bare task ID, or a newcomer's)."""
    if text.startswith(NEWCOMER_MARK):
        return Signal(text[len(NEWCOMER_MARK) :], newcomer=True)
    return Signal(text, newcomer=False)
