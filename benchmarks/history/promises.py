"""The promises ``wait_replicas`` makes, checked one by one: a weaker check than the
linearizability search, and the one a replicated Redis can pass.

Redis replicates asynchronously; ``WAIT`` makes a writer wait for its replicas but
makes no read wait, so a read may see a write its replicas never got (one still
waiting, or one that reported :class:`~redis_tasks.ReplicationError`) and a failover
may then roll it back. The search in :mod:`.checker` reports such a history, rightly:
no order explains it. What ``wait_replicas=1`` does promise is that a write whose
caller was told it succeeded is never rolled back. This module checks exactly that,
per task, from every operation that began after such a write returned:

- ``create lost``: the create was acknowledged, a later operation found no task;
- ``outcome lost``: an outcome was acknowledged (``complete``/``fail`` ok, or a claim
  that ended the task as cancelled), a later read saw another status or a later
  claim ran the task;
- ``two winners``: two outcomes were both acknowledged;
- ``answer lost``: an answer was acknowledged, a later read saw its key asked again;
- ``cancellation lost``: a cancellation request was acknowledged, a later claim ran
  the task.

A worker's input requests are no client's write: a lost one is asked again at the
worker's next poll, so it is not a promise (the search still reports it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from .ops import Op

__all__ = ["BREACHES", "Breach", "breaches", "check_promises"]

#: The promises, as :class:`Breach` names them.
BREACHES: Final = (
    "create lost",
    "outcome lost",
    "two winners",
    "answer lost",
    "cancellation lost",
)
_STATUS: Final = {"complete": "completed", "fail": "failed", "claim": "cancelled"}


@dataclass(frozen=True)
class Breach:
    """A promise broken: the acknowledged write and the later operation that shows it."""

    task: str
    kind: str
    acknowledged: Op
    later: Op

    def describe(self) -> str:
        """The task and kind, then the two operations."""
        return (
            f"task {self.task}: {self.kind}\n  {self.acknowledged.describe()}\n"
            f"  {self.later.describe()}"
        )


def _won(op: Op) -> bool:
    if not op.known:
        return False
    return (op.kind in ("complete", "fail") and op.value == "ok") or (
        op.kind == "claim" and op.value == "cancelled"
    )


def _missing(op: Op) -> bool:
    return op.value == "not_found" or (op.kind == "find" and op.value is None)


def breaches(task: str, ops: Iterable[Op]) -> Iterator[Breach]:
    """Each promise one task's history breaks (see the module)."""
    history = sorted(ops, key=lambda op: op.invoke)
    wins = [op for op in history if _won(op)]
    if len(wins) > 1:
        yield Breach(task, "two winners", wins[0], wins[1])
    for done in history:
        if not done.known or done.ret is None:
            continue
        after = [op for op in history if op.known and op.invoke > done.ret]
        if done.kind == "create" and done.value == "ok":
            later = next((op for op in after if _missing(op)), None)
            if later is not None:
                yield Breach(task, "create lost", done, later)
        elif _won(done):
            status = _STATUS[done.kind]
            later = next(
                (
                    op
                    for op in after
                    if (op.kind == "find" and op.value is not None and op.value["status"] != status)
                    or (op.kind == "claim" and op.value == "run")
                ),
                None,
            )
            if later is not None:
                yield Breach(task, "outcome lost", done, later)
        elif done.kind == "update" and done.value == "ok":
            keys = set(done.args["answers"])
            later = next(
                (
                    op
                    for op in after
                    if op.kind == "find" and op.value and keys & set(op.value["asking"])
                ),
                None,
            )
            if later is not None:
                yield Breach(task, "answer lost", done, later)
        elif done.kind == "cancel" and done.value == "ok":
            later = next((op for op in after if op.kind == "claim" and op.value == "run"), None)
            if later is not None:
                yield Breach(task, "cancellation lost", done, later)


def check_promises(histories: Mapping[str, Iterable[Op]]) -> list[Breach]:
    """Every breach of every task's history."""
    return [b for task, ops in histories.items() for b in breaches(task, ops)]
