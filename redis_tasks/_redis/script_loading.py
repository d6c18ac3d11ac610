"""One script loaded and checked: its source assembled and hashed, its binding held to
its header.

:mod:`.scripts` declares a *binding* per script (a function whose keyword-only
parameters restate the script's KEYS and ARGV) and loads every script through
:func:`load_script`, which refuses a binding whose parameters are not the
header's; :func:`check_binding` then refuses one that puts an argument in the
wrong place. The source itself is checked by :mod:`.lua_source` (the header, the
constants prepended, the includes the script names).
"""

from __future__ import annotations

import hashlib
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis_tasks._errors import InternalError

from .lua_header import check_leading_task_keys
from .lua_source import (
    Include,
    Spec,
    check_group_locals,
    check_literals,
    check_slot_locals,
    check_uses,
    join_source,
    named_includes,
    parse_header,
    resolve,
)
from .lua_text import redis_commands

__all__ = ["Arg", "Binding", "Call", "Script", "check_binding", "load_script"]

Arg = str | bytes | int

#: A bound script call: the script, its KEYS and its ARGV, in the header's order.
Call = tuple["Script", tuple[str, ...], tuple[Arg, ...]]
#: A script's binding: keyword-only arguments in, its :data:`Call` out.
Binding = Callable[..., Call]


@dataclass(frozen=True, slots=True)
class Script:
    """One loaded script: the includes it got, its full source and SHA1, and the Redis
    commands that source calls (by ACL name: what a user running it must be granted)."""

    name: str
    spec: Spec
    includes: tuple[str, ...]
    source: str
    sha: str
    commands: frozenset[str]


def _parameters(binding: Binding) -> list[inspect.Parameter]:
    return list(inspect.signature(binding).parameters.values())


def _check_signature(name: str, binding: Binding, spec: Spec) -> None:
    """Refuse a binding whose parameters are not the header's KEYS, ARGV and
    trailing ARGV, by keyword only, in that order."""
    parameters = _parameters(binding)
    expected = [*spec.keys, *spec.argv, *([spec.variadic] if spec.variadic else [])]
    if [p.name for p in parameters] != expected or any(
        p.kind is not inspect.Parameter.KEYWORD_ONLY
        or p.default is not p.empty
        # The trailing ARGV, and only they, come as a sequence.
        or str(p.annotation).startswith("Sequence[") != (p.name == spec.variadic)
        for p in parameters
    ):
        raise InternalError(f"lua/{name}.lua header disagrees with its binding {name}()")
    if spec.group and _group_fields(binding, spec) != spec.group:
        raise InternalError(f"lua/{name}.lua header's {spec.variadic} disagree with {name}()")


def _group_type(binding: Binding, spec: Spec) -> Any:
    """The element type of the binding's grouped trailing ARGV (``Sequence[T]``)."""
    hints = typing.get_type_hints(binding)
    arguments = typing.get_args(hints.get(spec.variadic or "", object))
    return arguments[0] if arguments else None


def _group_fields(binding: Binding, spec: Spec) -> tuple[str, ...]:
    """The fields of that element type, a NamedTuple: the group as Python packs it."""
    fields = getattr(_group_type(binding, spec), "_fields", None)
    return tuple(fields) if isinstance(fields, tuple) else ()


def check_binding(binding: Binding, script: Script) -> None:
    """Refuse a binding that does not return ``script`` with each argument in its
    place: called with every argument its own name, it must answer the header."""
    spec = script.spec
    arguments: dict[str, Any] = {p.name: p.name for p in _parameters(binding)}
    trailing: tuple[str, ...] = ()
    if spec.variadic and spec.group:
        # One group whose every field is its own name: packed flat, in header order.
        arguments[spec.variadic] = (_group_type(binding, spec)(*spec.group),)
        trailing = spec.group
    elif spec.variadic:
        arguments[spec.variadic] = (f"{spec.variadic}..",)
        trailing = (f"{spec.variadic}..",)
    try:
        call = binding(**arguments)
    except TypeError as exc:
        raise InternalError(f"the binding of {script.name} does not take its contract") from exc
    if call[0] is not script or call[1:] != (spec.keys, (*spec.argv, *trailing)):
        raise InternalError(f"the binding of {script.name} misplaces its arguments")


def load_script(
    directory: Path, name: str, includes: dict[str, Include], binding: Binding
) -> Script:
    """Load ``lua/<name>.lua`` from ``directory`` with the ``includes`` it names,
    refusing a header that ``binding``'s parameters disagree with."""
    where = f"lua/{name}.lua"
    body = (directory / f"{name}.lua").read_text(encoding="utf-8")
    spec, header = parse_header(name, body)
    check_leading_task_keys(where, body, spec)
    _check_signature(name, binding, spec)
    check_literals(where, body)
    check_slot_locals(where, body, spec)
    check_group_locals(where, body, spec)
    named = named_includes(where, header)
    check_uses(where, body, named, includes)
    order = resolve(named, includes)
    source = join_source(order, body, includes, where, spec.group_constants())
    sha = hashlib.sha1(source.encode()).hexdigest()  # noqa: S324
    return Script(name, spec, tuple(order), source, sha, redis_commands(where, source))
