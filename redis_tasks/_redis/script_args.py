"""The repeated argument groups of the batch scripts, one named tuple each.

A batch script (``lua/create.lua``, ``lua/finish_batch.lua``) takes one group of
arguments per task after its own; each group's fields are its header's names, in
order, and the loader (:mod:`.script_loading`) checks the two agree. Kept apart
from the bindings (:mod:`.scripts`), which re-export them.
"""

from __future__ import annotations

from typing import NamedTuple

from .script_loading import Arg

__all__ = ["CreateArgs", "FinishArgs", "limits_arg"]


class CreateArgs(NamedTuple):
    """One task's create in a ``create`` call: the header's ``creates`` group
    (create's arguments but the keys, ``event_opts`` and ``fair``, with the grant
    key's digest and the tenant's limits in one: :func:`limits_arg`), field for
    field; the loader checks the two agree."""

    task_id: str
    grant: str
    binding: str
    origin: Arg
    payload: Arg
    ttl_ms: Arg
    poll_ms: Arg
    metadata: Arg
    trace_context: Arg
    tenant: str
    limits: str


def limits_arg(
    settings: str, cap: int, max_open: int, rate_us: int, burst_us: int, terms: str
) -> str:
    """``create``'s ``limits``: ``""`` for a tenant with none, else the six
    joined by ``|`` (``terms`` last: it is the only one that may hold one)."""
    if not (settings or cap or max_open or rate_us or burst_us or terms):
        return ""
    return f"{settings}|{cap}|{max_open}|{rate_us}|{burst_us}|{terms}"


class FinishArgs(NamedTuple):
    """One task's outcome in a ``finish_batch`` call: the header's ``outcomes`` group
    (finish.lua's ARGV 1 to 7), field for field; the loader checks the two agree."""

    task_id: str
    fence: Arg
    status: str
    has_message: Arg
    message: Arg
    outcome_field: Arg
    outcome: Arg
