"""The Lua scripts: the catalogue of their KEYS/ARGV contracts, and loading them.

Each script in ``lua/`` opens with a ``--[[ ]]`` header that lists its KEYS
and ARGV. Its *binding* here, a function of the same name, restates that
contract as keyword-only parameters and makes the call from named arguments:
``runner.run(scripts.find(task=..., requests=..., grant=..., binding=...))``.
Importing this module checks each binding against its header and its body
against its parameters (:data:`SPECS` is the contract both declare), so a
script and its callers cannot drift apart, and a call with a missing, extra or
misnamed argument fails where it is made (for mypy too).

Loading (:mod:`.script_loading`) checks each script's source with
:mod:`.lua_source`: its header, the constants prepended to it, and the includes
it names. Each command is so one
self-contained script with one SHA, called with EVALSHA and reloaded on NOSCRIPT
(see :mod:`.runner`, which runs them).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, TypeVar

from .lua_source import (
    CONSTANTS,
    Include,
    Spec,
    assemble,
    check_literals,
    lua_dir,
    read_includes,
)
from .script_args import CreateArgs, FinishArgs, limits_arg
from .script_loading import Arg, Binding, Call, Script, check_binding, load_script

__all__ = [
    "CONSTANTS",
    "SPECS",
    "Arg",
    "Call",
    "CreateArgs",
    "FinishArgs",
    "Include",
    "Script",
    "Spec",
    "assemble",
    "cancel_requested",
    "check_binding",
    "check_literals",
    "claim",
    "claim_next",
    "create",
    "expired_leases",
    "find",
    "finish",
    "finish_batch",
    "inspect_queue",
    "inspect_task",
    "inspect_tenants",
    "limits_arg",
    "load_all",
    "lua_dir",
    "park",
    "release",
    "renew",
    "request_cancel",
    "request_input",
    "requeue",
    "scripts",
    "set_status",
    "take_answers",
    "update",
]

_BindingT = TypeVar("_BindingT", bound="Callable[..., Call]")
_BINDINGS: dict[str, Binding] = {}


def _binding(function: _BindingT) -> _BindingT:
    """Register ``function`` as the binding of the script of the same name."""
    _BINDINGS[function.__name__] = function
    return function


# The bindings: one function per script whose keyword-only parameters are its
# KEYS, then its ARGV, then (a flat sequence) its trailing repeated ARGV, named
# and ordered as in the script's header; importing this module checks that, and
# that each puts every argument in its place. A call with a missing, extra or
# misnamed argument raises TypeError at the call site, and mypy sees it there.
# Each returns the call for ScriptRunner.run: a tuple of the script and two
# tuples, built here in header order with no per-call lookup of names.


@_binding
def create(
    *,
    work: str,
    events: str,
    stats: str,
    ring: str,
    tenants: str,
    signals: str,
    seen: str,
    tag: str,
    event_opts: str,
    fair: int,
    creates: Sequence[CreateArgs],
) -> Call:
    flat = itertools.chain.from_iterable(creates)
    return (
        scripts["create"],
        (work, events, stats, ring, tenants, signals, seen),
        (tag, event_opts, fair, *flat),
    )


@_binding
def find(*, task: str, requests: str, grant: str, binding: str, confirm: int) -> Call:
    return scripts["find"], (task, requests, grant), (binding, confirm)


@_binding
def update(
    *,
    task: str,
    requests: str,
    answers: str,
    journal: str,
    events: str,
    signals: str,
    grant: str,
    work: str,
    stats: str,
    task_id: str,
    binding: str,
    event_opts: str,
    fair: int,
    responses: Sequence[Arg],
) -> Call:
    return (
        scripts["update"],
        (task, requests, answers, journal, events, signals, grant, work, stats),
        (task_id, binding, event_opts, fair, *responses),
    )


@_binding
def request_cancel(
    *,
    task: str,
    requests: str,
    issued: str,
    answers: str,
    journal: str,
    work: str,
    events: str,
    stats: str,
    signals: str,
    grant: str,
    task_id: str,
    binding: str,
    event_opts: str,
) -> Call:
    return (
        scripts["request_cancel"],
        (task, requests, issued, answers, journal, work, events, stats, signals, grant),
        (task_id, binding, event_opts),
    )


@_binding
def set_status(
    *,
    task: str,
    requests: str,
    events: str,
    task_id: str,
    fence: bytes,
    has_message: bytes,
    message: bytes,
    event_opts: str,
) -> Call:
    return (
        scripts["set_status"],
        (task, requests, events),
        (task_id, fence, has_message, message, event_opts),
    )


@_binding
def request_input(
    *,
    task: str,
    requests: str,
    issued: str,
    answers: str,
    journal: str,
    events: str,
    task_id: str,
    fence: bytes,
    has_message: bytes,
    message: bytes,
    event_opts: str,
    round: Sequence[Arg],
) -> Call:
    return (
        scripts["request_input"],
        (task, requests, issued, answers, journal, events),
        (task_id, fence, has_message, message, event_opts, *round),
    )


@_binding
def take_answers(*, task: str, answers: str, fence: bytes) -> Call:
    return scripts["take_answers"], (task, answers), (fence,)


@_binding
def finish(
    *,
    task: str,
    requests: str,
    issued: str,
    answers: str,
    journal: str,
    work: str,
    events: str,
    stats: str,
    signals: str,
    task_id: str,
    fence: bytes,
    status: str,
    has_message: bytes,
    message: bytes,
    outcome_field: bytes,
    outcome: bytes,
    operation: bytes,
    event_opts: str,
) -> Call:
    return (
        scripts["finish"],
        (task, requests, issued, answers, journal, work, events, stats, signals),
        (
            task_id,
            fence,
            status,
            has_message,
            message,
            outcome_field,
            outcome,
            operation,
            event_opts,
        ),
    )


@_binding
def finish_batch(
    *,
    work: str,
    events: str,
    stats: str,
    tag: str,
    event_opts: str,
    outcomes: Sequence[FinishArgs],
) -> Call:
    flat = itertools.chain.from_iterable(outcomes)
    return scripts["finish_batch"], (work, events, stats), (tag, event_opts, *flat)


@_binding
def cancel_requested(*, task: str, fence: bytes) -> Call:
    return scripts["cancel_requested"], (task,), (fence,)


@_binding
def claim(
    *,
    task: str,
    requests: str,
    issued: str,
    answers: str,
    journal: str,
    work: str,
    events: str,
    stats: str,
    task_id: str,
    entry_id: str,
    consumer: str,
    lease_ms: int,
    max_attempts: int,
    poison_error: bytes,
    event_opts: str,
) -> Call:
    return (
        scripts["claim"],
        (task, requests, issued, answers, journal, work, events, stats),
        (task_id, entry_id, consumer, lease_ms, max_attempts, poison_error, event_opts),
    )


@_binding
def claim_next(
    *,
    work: str,
    events: str,
    stats: str,
    tag: str,
    consumer: str,
    count: int,
    lease_ms: int,
    max_attempts: int,
    poison_error: bytes,
    event_opts: str,
    wake: int,
    first: str,
    call_id: str,
) -> Call:
    return (
        scripts["claim_next"],
        (work, events, stats),
        (
            tag,
            consumer,
            count,
            lease_ms,
            max_attempts,
            poison_error,
            event_opts,
            wake,
            first,
            call_id,
        ),
    )


@_binding
def renew(
    *, task: str, work: str, task_id: str, fence: bytes, consumer: str, lease_ms: int
) -> Call:
    return scripts["renew"], (task, work), (task_id, fence, consumer, lease_ms)


@_binding
def expired_leases(*, leases: str, count: int) -> Call:
    return scripts["expired_leases"], (leases,), (count,)


@_binding
def release(*, task: str, work: str, task_id: str, fence: bytes) -> Call:
    return scripts["release"], (task, work), (task_id, fence)


@_binding
def park(*, task: str, requests: str, work: str, task_id: str, fence: bytes) -> Call:
    return scripts["park"], (task, requests, work), (task_id, fence)


@_binding
def requeue(*, task: str, work: str, task_id: str, entry_id: str) -> Call:
    return scripts["requeue"], (task, work), (task_id, entry_id)


@_binding
def inspect_queue(*, work: str, stats: str, ring: str, parked: str, tag: str, sample: int) -> Call:
    return scripts["inspect_queue"], (work, stats, ring, parked), (tag, sample)


@_binding
def inspect_tenants(*, seen: str, ring: str, parked: str, tag: str, sample: int) -> Call:
    return scripts["inspect_tenants"], (seen, ring, parked), (tag, sample)


@_binding
def inspect_task(*, task: str, requests: str, work: str) -> Call:
    return scripts["inspect_task"], (task, requests, work), ()


def load_all(directory: Path | None = None) -> dict[str, Script]:
    """Load and check every script that has a binding, from ``directory`` (``lua_dir()``)."""
    directory = directory or lua_dir()
    includes = read_includes(directory)
    return {
        name: load_script(directory, name, includes, binding) for name, binding in _BINDINGS.items()
    }


#: Every script, loaded and checked once at import.
scripts: Final[dict[str, Script]] = load_all()
for _name, _script in scripts.items():
    check_binding(_BINDINGS[_name], _script)

#: The contract of every script, as its header and its binding declare it.
SPECS: Final[dict[str, Spec]] = {name: script.spec for name, script in scripts.items()}
