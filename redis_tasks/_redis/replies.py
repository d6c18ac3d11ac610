"""Typed readers of the scripts' replies: each holds a reply to the shape its
script's header promises before anything reads it by position.

The scripts answer flat Lua tables, and the callers used to read them by position
(``reply[1]``, ``reply[2:6]``): a script that moved or dropped an element would
have been read as something else, silently. Each reader here checks the number
and kind of each element its script's ``Returns`` section names, and raises
:class:`InternalError` naming the script (never the data) when the reply does not
fit: a script and its reader that disagree fail at the first call, loudly. Codes
other than ``RC_OK`` are mapped by :func:`~redis_tasks._codes.error_for` as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from redis_tasks._codes import ReturnCode, error_for
from redis_tasks._errors import InternalError
from redis_tasks._lease import Claim, ClaimOutcome
from redis_tasks._record import SNAPSHOT_FIELDS, decode_origin

__all__ = [
    "answers",
    "claim",
    "claim_batch",
    "claim_batch_started",
    "claim_batch_wrote",
    "claim_started",
    "claim_wrote",
    "created",
    "expired_leases",
    "flag",
    "flat_records",
    "shaped",
    "snapshot",
    "started",
    "wrote",
]

#: The claim codes that settle a task (or leave it) instead of running it.
_SETTLED: Final[dict[int, ClaimOutcome]] = {
    ReturnCode.NOT_FOUND: ClaimOutcome.EXPIRED,
    ReturnCode.TERMINAL: ClaimOutcome.TERMINAL,
    ReturnCode.CANCELLED: ClaimOutcome.CANCELLED,
    ReturnCode.POISONED: ClaimOutcome.POISONED,
    ReturnCode.LEASE_HELD: ClaimOutcome.LEASE_HELD,
    ReturnCode.DEFERRED: ClaimOutcome.DEFERRED,
}
#: What a reader may find where a script returns a string: bytes (the scripts send
#: ``''`` for an absent value, since a Lua ``nil`` would end the table there).
_TEXT: Final = (bytes,)


def _unfit(script: str) -> InternalError:
    return InternalError(f"unexpected reply from lua/{script}.lua")


def shaped(reply: Any, script: str, *kinds: type | tuple[type, ...]) -> list[Any]:
    """``reply`` as a list of exactly ``len(kinds)`` elements, each of its kind; raises
    :class:`InternalError` naming ``script`` otherwise."""
    if not isinstance(reply, list) or len(reply) != len(kinds):
        raise _unfit(script)
    for value, kind in zip(reply, kinds, strict=True):
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise _unfit(script)
    return reply


def _ok(reply: Any, script: str) -> list[Any]:
    """The reply after its code: a non-OK code raises what it maps to."""
    if not isinstance(reply, list) or not reply or not isinstance(reply[0], int):
        raise _unfit(script)
    if reply[0] != ReturnCode.OK:
        detail = reply[1] if len(reply) > 1 and isinstance(reply[1], bytes) else None
        raise error_for(reply[0], detail)
    return reply


def _pairs(values: Any, script: str) -> list[bytes]:
    """A flat ``key, value, ...`` list of byte strings."""
    if (
        not isinstance(values, list)
        or len(values) % 2
        or not all(isinstance(v, bytes) for v in values)
    ):
        raise _unfit(script)
    return values


def cancel_ended(reply: Any) -> bool:
    """``request_cancel``: ``{RC_OK, ended}``: whether the call ended the task."""
    _, ended = shaped(_ok(reply, "request_cancel"), "request_cancel", int, int)
    return bool(ended)


def created(reply: Any, count: int, unconfirmed: Exception | None) -> list[int | BaseException]:
    """``create``: ``{RC_OK, code, value, ...}``, a pair per create: each
    create's time (ms), or the error its code maps to; ``unconfirmed`` (the call's
    writes not confirmed by enough replicas) is the error of each that answered OK,
    as a lone create's would be."""
    if (
        not isinstance(reply, list)
        or len(reply) != 1 + 2 * count
        or reply[0] != ReturnCode.OK
        or isinstance(reply[0], bool)
    ):
        raise _unfit("create")
    out: list[int | BaseException] = []
    for at in range(1, len(reply), 2):
        code, value = reply[at], reply[at + 1]
        if not isinstance(code, int) or isinstance(code, bool):
            raise _unfit("create")
        if code != ReturnCode.OK:
            if not isinstance(value, bytes):
                raise _unfit("create")
            out.append(error_for(code, value or None))
        elif not isinstance(value, int) or isinstance(value, bool):
            raise _unfit("create")
        else:
            out.append(unconfirmed if unconfirmed is not None else value)
    return out


def snapshot(reply: Any) -> tuple[list[bytes | None], list[bytes]]:
    """``find``: ``{RC_OK, {the snapshot fields}, {request key, kind+body, ...}}``; a
    field Redis does not have arrives as ``None``."""
    _, fields, requests = shaped(_ok(reply, "find"), "find", int, list, list)
    if len(fields) != len(SNAPSHOT_FIELDS) or not all(
        f is None or isinstance(f, bytes) for f in fields
    ):
        raise _unfit("find")
    return fields, _pairs(requests, "find")


def expired_leases(reply: Any) -> list[str]:
    """``expired_leases``: ``{RC_OK, {task_id, ...}}``, as text."""
    ids = shaped(_ok(reply, "expired_leases"), "expired_leases", int, list)[1]
    if not all(isinstance(task_id, bytes) for task_id in ids):
        raise _unfit("expired_leases")
    return [task_id.decode("utf-8", "replace") for task_id in ids]


def answers(reply: Any, script: str) -> list[bytes]:
    """``request_input`` and ``take_answers``: ``{RC_OK, {key, answer, ...}}``."""
    return _pairs(shaped(_ok(reply, script), script, int, list)[1], script)


def flag(reply: Any, script: str) -> bool:
    """``renew``, ``cancel_requested`` and ``park``: ``{RC_OK, 0 | 1}``."""
    value = shaped(_ok(reply, script), script, int, int)[1]
    if value not in (0, 1):
        raise _unfit(script)
    return bool(value)


def _one_claim(reply: Any, script: str, backlog: bool = False) -> Claim:
    """One claim's reply (``lua/includes/claim.lua``): a settled code alone, or
    ``{RC_OK, fence, attempt, origin, payload, trace_context, parks, recorded}``."""
    if not isinstance(reply, list) or not reply or not isinstance(reply[0], int):
        raise _unfit(script)
    code = reply[0]
    if code in _SETTLED:
        if len(reply) != 1:
            raise _unfit(script)
        return Claim(_SETTLED[code], backlog=backlog)
    _, fence, attempt, origin, payload, trace, parks, recorded = shaped(
        _ok(reply, script), script, int, int, int, _TEXT, _TEXT, _TEXT, _TEXT, list
    )
    if (
        not parks.isdigit()
        or len(recorded) % 3
        or not all(isinstance(value, bytes) for value in recorded)
    ):
        raise _unfit(script)
    return Claim(
        ClaimOutcome.RUN,
        fence,
        attempt,
        decode_origin(origin),
        payload,
        trace,
        backlog=backlog,
        parks=int(parks),
        recorded=tuple(
            (recorded[i], recorded[i + 1], recorded[i + 2]) for i in range(0, len(recorded), 3)
        ),
    )


def claim(reply: Any) -> Claim:
    """``claim``: ``{RC_OK, backlog, one claim}``."""
    _, backlog, one = shaped(_ok(reply, "claim"), "claim", int, int, list)
    if backlog not in (0, 1):
        raise _unfit("claim")
    return _one_claim(one, "claim", backlog=bool(backlog))


#: Claim outcomes that wrote what ``wait_replicas`` must confirm: an ending (a terminal
#: transition the claim wrote), or a start (its worker runs the task only once a replica
#: holds the claim, and with it the create before it).
_WROTE: Final = frozenset({ClaimOutcome.CANCELLED, ClaimOutcome.POISONED, ClaimOutcome.RUN})


def wrote(one: Claim) -> bool:
    """Whether a claim ended or started its task (a write ``wait_replicas`` must confirm)."""
    return one.outcome in _WROTE


def started(one: Claim) -> bool:
    """Whether a claim starts its task (held until a replica confirms it)."""
    return one.outcome is ClaimOutcome.RUN


def claim_wrote(reply: list[Any]) -> bool:
    """Whether a ``claim`` reply started or ended its task."""
    return wrote(claim(reply))


def claim_started(reply: list[Any]) -> bool:
    """Whether a ``claim`` reply started its task."""
    return started(claim(reply))


def claim_batch_wrote(reply: list[Any]) -> bool:
    """Whether a ``claim_next`` reply started or ended any of its tasks."""
    return any(wrote(one) for _, _, one in claim_batch(reply))


def claim_batch_started(reply: list[Any]) -> bool:
    """Whether a ``claim_next`` reply started any of its tasks."""
    return any(started(one) for _, _, one in claim_batch(reply))


def claim_batch(reply: Any) -> list[tuple[str, str | None, Claim]]:
    """``claim_next``: ``{RC_OK, entry_id, task_id, claim, ...}``: each entry's ID, its
    task ID (``None`` for an entry that named no task) and its claim."""
    body = _ok(reply, "claim_next")[1:]
    if len(body) % 3:
        raise _unfit("claim_next")
    out: list[tuple[str, str | None, Claim]] = []
    for i in range(0, len(body), 3):
        entry_id, task_id, one = shaped(body[i : i + 3], "claim_next", bytes, bytes, list)
        out.append((entry_id.decode(), task_id.decode() or None, _one_claim(one, "claim_next")))
    return out


def flat_records(values: Any, script: str, width: int) -> Sequence[Any]:
    """A flat list of records of ``width`` elements each (``inspect_queue``'s consumers
    and leases); raises when its length does not divide."""
    if not isinstance(values, list) or width < 1 or len(values) % width:
        raise _unfit(script)
    return values
