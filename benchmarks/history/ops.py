"""One recorded operation on one task, and what its caller saw, normalised so the model's
answer and the recorded one compare with ``==``.

An operation's ``ret`` is ``None`` when nobody knows whether it took effect (a
timeout, a lost connection): the checker may place it anywhere after its
invocation, or leave it out. Every other outcome, an error included (``not_found``,
``terminal``), is a definite answer the model must give too.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Final

__all__ = ["KINDS", "Op", "dumps", "loads"]

#: What a history records: a client's create, read, answers and cancellation; a
#: worker's input round and outcome (written without a fence in the model: a recorded
#: worker held the lease when it wrote).
KINDS: Final = (
    "create",
    "find",
    "update",
    "cancel",
    "claim",
    "request_input",
    "park",
    "complete",
    "fail",
)


@dataclass(frozen=True)
class Op:
    """One operation: who called what, when, and what came back.

    ``args`` by kind: ``update`` ``{"answers": {key: answer}}``, ``request_input``
    ``{"keys": [key, ...]}``, ``complete`` ``{"result": {...}}``, ``fail``
    ``{"code": int}``; the others none. ``value`` by kind: ``find`` ``None`` (not
    found) or the snapshot ``{"status", "message", "result", "error", "asking"}``;
    ``claim`` ``"run"``, ``"cancelled"`` (a cancellation asked before anyone ran it ends
    the task), ``"terminal"`` or ``"not_found"``; every other kind ``"ok"``,
    ``"not_found"`` or ``"terminal"`` (``request_input``: ``["ok", answers]``; ``park``:
    ``"parked"`` or ``"not_parked"``). Times
    are seconds on one clock.
    """

    index: int
    process: str
    kind: str
    invoke: float
    ret: float | None
    value: Any = None
    args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown operation kind {self.kind!r}")
        if self.ret is not None and self.ret < self.invoke:
            raise ValueError("an operation cannot return before it was invoked")

    @property
    def known(self) -> bool:
        """Whether its caller learned its outcome."""
        return self.ret is not None

    def describe(self) -> str:
        """One line: index, process, kind, arguments, times and outcome."""
        args = f" {json.dumps(self.args, sort_keys=True)}" if self.args else ""
        ret = "?" if self.ret is None else f"{self.ret:.6f}"
        seen = "unknown" if self.ret is None else json.dumps(self.value, sort_keys=True)
        return (
            f"#{self.index} {self.process} {self.kind}{args} [{self.invoke:.6f}, {ret}] -> {seen}"
        )


def dumps(ops: list[Op]) -> str:
    """A history as JSON lines."""
    return "".join(json.dumps(asdict(op), sort_keys=True) + "\n" for op in ops)


def loads(text: str) -> list[Op]:
    """A history from :func:`dumps`."""
    return [Op(**json.loads(line)) for line in text.splitlines() if line.strip()]
