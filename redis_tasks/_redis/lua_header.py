"""A script's ``--[[ ]]`` header: the KEYS and ARGV it declares (:class:`Spec`), and
the checks that hold a script's body to it (its slot locals, its repeated group).

A leaf of the loader: :mod:`.lua_source` assembles scripts, :mod:`.script_loading`
holds each binding to the :class:`Spec` parsed here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from redis_tasks._errors import InternalError

from .lua_text import code

__all__ = [
    "LEADING_TASK_KEYS",
    "Spec",
    "check_group_locals",
    "check_header",
    "check_leading_task_keys",
    "check_slot_locals",
    "parse_header",
]

_HEADER = re.compile(r"\A--\[\[(.*?)\]\]", re.S)
_SLOT = re.compile(r"^\s+(\d+)(\.\.)?\s+(\w+)", re.M)
# A repeated group's names, right after its trailing ARGV slot: `3.. outcomes  (a, b, c)`.
_GROUP = re.compile(r"^\s+\d+\.\.\s+\w+\s+\(([\w,\s]+)\)", re.M)
# Where a script unpacks one group into locals: `local a, b, c = unpack(ARGV, i, ...)`.
_GROUP_LOCALS = re.compile(r"\blocal\s+([\w\s,]+?)\s*=\s*unpack\(ARGV,")


@dataclass(frozen=True, slots=True)
class Spec:
    """A script's KEYS and ARGV names; ``variadic`` names trailing repeated ARGV, and
    ``group`` the names of each repeated group of them, when the header declares one
    (``3.. outcomes  (task_id, fence, ...)``)."""

    keys: tuple[str, ...]
    argv: tuple[str, ...]
    variadic: str | None = None
    group: tuple[str, ...] = ()

    def group_constants(self) -> dict[str, str]:
        """The constants a script with a group gets: where the groups start in ARGV
        (``<VARIADIC>_FROM``) and how many ARGV each takes (``<VARIADIC>_EACH``)."""
        if not self.group or self.variadic is None:
            return {}
        name = self.variadic.upper()
        return {f"{name}_FROM": str(len(self.argv) + 1), f"{name}_EACH": str(len(self.group))}


def _section(header: str, name: str) -> list[tuple[int, bool, str]]:
    match = re.search(rf"^\s*{name}:\n((?:\s{{3,}}.*\n?)*)", header, re.M)
    if match is None:
        raise InternalError(f"script header lacks a {name} section")
    return [(int(n), bool(dots), word) for n, dots, word in _SLOT.findall(match.group(1))]


def parse_header(name: str, source: str) -> tuple[Spec, str]:
    """The contract ``source``'s header declares, and the header's text."""
    header = _HEADER.match(source)
    if header is None:
        raise InternalError(f"lua/{name}.lua does not open with a --[[ ]] header")
    keys = _section(header.group(1), "KEYS")
    argv = _section(header.group(1), "ARGV")
    numbers_ok = [n for n, _, _ in keys] == list(range(1, len(keys) + 1)) and [
        n for n, _, _ in argv
    ] == list(range(1, len(argv) + 1))
    variadic = [word for _, dots, word in argv if dots]
    if not numbers_ok or len(variadic) > 1 or (variadic and not argv[-1][1]):
        raise InternalError(f"lua/{name}.lua header numbers its KEYS or ARGV wrongly")
    group = _GROUP.search(header.group(1))
    spec = Spec(
        tuple(word for _, _, word in keys),
        tuple(word for _, dots, word in argv if not dots),
        variadic[0] if variadic else None,
        tuple(name.strip() for name in group.group(1).split(",")) if group else (),
    )
    return spec, header.group(1)


def check_group_locals(where: str, source: str, spec: Spec) -> None:
    """Refuse a script with a repeated group that does not unpack each group, once,
    into locals named as its header names them, in order (the layout a binding
    packs: a field added on one side only fails at load, not mid-batch)."""
    if not spec.group:
        return
    found = [
        tuple(name.strip() for name in match.group(1).split(","))
        for match in _GROUP_LOCALS.finditer(code(source))
    ]
    if found != [spec.group]:
        raise InternalError(
            f"{where}: unpack each {spec.variadic} group into locals {', '.join(spec.group)}"
        )


def check_header(name: str, source: str, spec: Spec) -> None:
    """Refuse ``source`` unless its header declares ``spec``."""
    if parse_header(name, source)[0] != spec:
        raise InternalError(f"lua/{name}.lua header disagrees with its Python contract")


# `local name = KEYS[n]`, `= ARGV[n]`, `= tonumber(ARGV[n])`, `= ARGV[n] == '1'`: a local
# bound to one argument slot.
_SLOT_LOCAL = re.compile(r"^local\s+(\w+)\s*=\s*(?:tonumber\()?(KEYS|ARGV)\[(\d+)\]", re.M)


def check_slot_locals(where: str, source: str, spec: Spec) -> None:
    """Refuse a local bound to a KEYS or ARGV slot whose name is not that slot's name
    in the header (or that name and a suffix: ``task_key`` for KEYS ``task``,
    ``ttl_ms_text`` for ARGV ``ttl_ms``): two locals swapped (``fence`` reading the
    status, ``status`` the fence) would pass every other check."""
    names = {"KEYS": spec.keys, "ARGV": spec.argv}
    for match in _SLOT_LOCAL.finditer(code(source)):
        local, kind, index = match.group(1), match.group(2), int(match.group(3))
        slots = names[kind]
        if not 1 <= index <= len(slots):
            raise InternalError(
                f"{where}: local {local} reads {kind}[{index}], which the header lacks"
            )
        slot = slots[index - 1]
        if local != slot and not local.startswith(f"{slot}_"):
            raise InternalError(
                f"{where}: local {local} reads {kind}[{index}], which the header names {slot}"
            )


# The KEYS that lua/includes/keys.lua's leading_task_keys() reads by number, in order.
LEADING_TASK_KEYS = ("task", "requests", "issued", "answers", "journal", "work", "events", "stats")
_LEADING_CALL = re.compile(r"\bleading_task_keys\(\)")


def check_leading_task_keys(where: str, source: str, spec: Spec) -> None:
    """Refuse a script that calls ``leading_task_keys()`` unless its header declares
    :data:`LEADING_TASK_KEYS` as its first KEYS: the helper reads them by number, so
    a key inserted before them would hand every task key its neighbour's name."""
    if _LEADING_CALL.search(code(source)) and spec.keys[: len(LEADING_TASK_KEYS)] != (
        LEADING_TASK_KEYS
    ):
        raise InternalError(
            f"{where} calls leading_task_keys() but its KEYS do not open with "
            + ", ".join(LEADING_TASK_KEYS)
        )
