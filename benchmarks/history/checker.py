"""The check: is there an order of one task's operations, each taking effect at one instant
between its invocation and its return, that the model answers as the callers were answered?

This is Wing and Gong's search, as Knossos runs it, with Lowe's cache: from the
operations not yet placed, any one invoked before every other pending operation
returned may go next; the model applies it and, for an operation whose outcome is
known, must answer what its caller saw. An operation nobody heard back from (``ret``
is ``None``) may be placed anywhere after its invocation, or never. A state reached
before (the same operations placed, the same record) is not searched again.

Tasks are independent, so each task's history is checked alone and stays small (tens
of operations). A history with no such order is an anomaly, reported with the
smallest sub-history that still has none: operations whose outcome is known are
dropped one at a time while the rest stays unexplainable. The create and every
write nobody heard back from are kept: dropping an unknown operation never makes a
history explainable (it may always be left out), so the search alone would drop
them all, and with them the write a read saw before a failover rolled it back. (An
unknown read changed nothing, so it is dropped like a known one.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from .model import TaskModel
from .ops import Op

__all__ = ["Anomaly", "check", "check_task", "linearizable"]

#: States one task's search may visit before it gives up (a history so tangled is
#: reported as undecided, never as fine).
MAX_STATES: Final = 200_000


class Undecided(Exception):
    """The search visited :data:`MAX_STATES` states without an answer."""


@dataclass(frozen=True)
class Anomaly:
    """A task whose history no order explains, with the smallest part that shows it."""

    task: str
    history: tuple[Op, ...]
    undecided: bool = False

    def describe(self) -> str:
        """The task, then one line per operation of the minimal history."""
        head = f"task {self.task}: " + (
            "undecided (search too large)" if self.undecided else "no linearization"
        )
        return "\n".join([head, *(f"  {op.describe()}" for op in self.history)])


async def linearizable(model: TaskModel, ops: Iterable[Op]) -> bool:
    """Whether some order of ``ops`` (see the module) is one the model explains."""
    ordered = sorted(ops, key=lambda op: (op.invoke, op.index))
    known = frozenset(op.index for op in ordered if op.known)
    seen: set[tuple[frozenset[int], str]] = set()

    async def search(done: frozenset[int], state: Any) -> bool:
        if known <= done:
            return True
        pending = [op for op in ordered if op.index not in done]
        horizon = min(op.ret for op in pending if op.ret is not None)
        for op in pending:
            if op.invoke > horizon:
                break  # invoked after a pending operation returned: not next
            for after, value in await model.outcomes(state, op):
                if op.known and value != op.value:
                    continue
                key = (done | {op.index}, model.digest(after))
                if key in seen:
                    continue
                seen.add(key)
                if len(seen) > MAX_STATES:
                    raise Undecided
                if await search(key[0], after):
                    return True
        return False

    return await search(frozenset(), None)


async def check_task(task: str, ops: Iterable[Op], model: TaskModel) -> Anomaly | None:
    """``None`` when ``ops`` (one task's) are explained, else the anomaly, minimised."""
    history = list(ops)
    try:
        if await linearizable(model, history):
            return None
    except Undecided:
        return Anomaly(task, tuple(history), undecided=True)
    keep = history
    for op in sorted(history, key=lambda o: o.index, reverse=True):
        if op.kind == "create" or (not op.known and op.kind != "find"):
            continue
        trial = [o for o in keep if o is not op]
        try:
            if not await linearizable(model, trial):
                keep = trial
        except Undecided:
            continue
    return Anomaly(task, tuple(sorted(keep, key=lambda o: o.index)))


async def check(histories: Mapping[str, Iterable[Op]]) -> list[Anomaly]:
    """Every task's anomaly (none: ``[]``), each checked on the same model."""
    model = TaskModel()
    await model.start()
    found = []
    for task, ops in histories.items():
        anomaly = await check_task(task, ops, model)
        if anomaly is not None:
            found.append(anomaly)
    return found
