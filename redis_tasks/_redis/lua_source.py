"""The Lua source itself: where it lives, its headers, the generated constants, includes.

A script's text is checked and assembled here, before any binding sees it: its
``--[[ ]]`` header parsed into a :class:`Spec` (:mod:`.lua_header`); the constants generated from
the Python definitions (:data:`CONSTANTS`) and the literal check that keeps
copies of them out of Lua; and the includes a script names, resolved in the
order they need each other and checked against what the script uses. Of the
constants and includes, a script carries only the definitions it uses
(:func:`join_source`, with :mod:`.lua_text`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from redis_tasks._codes import ReturnCode
from redis_tasks._errors import InternalError
from redis_tasks._ids import (
    ALPHABET_OTHERS,
    ALPHABET_RANGES,
    MAX_PARTITIONS,
    PARTITION_DIGITS,
    RANDOM_CHARS,
)
from redis_tasks._record import LONG_FIELDS, MAX_PIECES, PIECE_BYTES, RECORD_FIELDS
from redis_tasks._signals import NEWCOMER_MARK
from redis_tasks._stats import (
    CLAIM_FIELD_PREFIX,
    CREATED_FIELD,
    DEFERRED_FIELD,
    PICKUP_BOUNDS_MS,
    PICKUP_FIELDS,
    QUEUED_FIELD,
    REFUSALS_KEPT_MS,
    REFUSED_FIELDS,
)
from redis_tasks._status import TERMINAL_STATUSES, TaskStatus
from redis_tasks._tenancy import GOLDEN, JITTER_PRIME, JITTER_SALT, STRIDE_UNIT, VTIME_FIELD

from .keys import (
    ANSWERS_SUFFIX,
    BUSY_SUFFIX,
    DIRECT_ENTRY,
    EVENTS_SUFFIX,
    GRANT_INFIX,
    ISSUED_SUFFIX,
    JOURNAL_SUFFIX,
    LEASES_SUFFIX,
    OPEN_INFIX,
    PARKED_SUFFIX,
    PLAN_INFIX,
    QUEUE_INFIX,
    RATE_INFIX,
    REFUSED_INFIX,
    REQUESTS_SUFFIX,
    RING_SUFFIX,
    RUN_INFIX,
    SEEN_SUFFIX,
    SIGNALS_SUFFIX,
    STATS_SUFFIX,
    TASK_INFIX,
    TENANTS_SUFFIX,
    WAITING_INFIX,
    WAITING_SUFFIX,
    WORK_GROUP,
    WORK_SUFFIX,
)
from .lua_header import (
    Spec,
    check_group_locals,
    check_header,
    check_slot_locals,
    parse_header,
)
from .lua_text import (
    LUA_TOKENS,
    TOP_LEVEL_LOCAL,
    USED_NAME,
    check_globals,
    code,
    definitions,
    inline,
    keep_used,
)

__all__ = [
    "CONSTANTS",
    "Include",
    "Spec",
    "assemble",
    "check_group_locals",
    "check_header",
    "check_literals",
    "check_slot_locals",
    "check_uses",
    "join_source",
    "lua_dir",
    "named_includes",
    "parse_header",
    "read_includes",
    "resolve",
]


def lua_dir() -> Path:
    """Where the scripts are: inside the installed package, or the source tree's ``lua/``."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "lua"
    return packaged if packaged.is_dir() else package.parent / "lua"


def lua_string(text: str) -> str:
    """``text`` as a Lua string literal (printable ASCII only: what we generate)."""
    if not text.isascii() or not text.isprintable():
        raise InternalError(f"cannot write {text!r} as a Lua literal")
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _lua_set(names: Iterable[str]) -> str:
    return "{" + ", ".join(f"[{name}] = true" for name in names) + "}"


_LUA_MAGIC: Final = "^$()%.[]*+-?"  # what a Lua pattern quotes with %


def _task_id_pattern() -> str:
    """The Lua pattern of a task ID, from :mod:`redis_tasks._ids`'s definition.

    It captures the partition's digits; a Lua pattern has no alternatives and no
    counted repeats, so ``is_task_id`` (``lua/includes/keys.lua``) checks the
    partition's leading zero and bound, and the random part's length
    (``RANDOM_CHARS``), after the match. One class repeated (``[...]+``), not the
    class written out once a character: Lua finds a class's end at each use, and the
    written-out pattern took twice as long (0.39 against 0.21 us an ID, EVAL loops),
    three times a drained job.
    """
    others = "".join(f"%{c}" if c in _LUA_MAGIC else c for c in ALPHABET_OTHERS)
    char = f"[{''.join(ALPHABET_RANGES)}{others}]"
    return f"^([0-9]+)%.{char}+$"


def status_constant(status: TaskStatus) -> str:
    return f"ST_{status.name}"


#: Constants every script gets, generated from the Python definitions.
CONSTANTS: Final[dict[str, str]] = {
    **{f"RC_{code.name}": str(code.value) for code in ReturnCode},
    **{status_constant(status): lua_string(status.value) for status in TaskStatus},
    "TERMINAL": _lua_set(sorted(status_constant(status) for status in TERMINAL_STATUSES)),
    "WORK_GROUP": lua_string(WORK_GROUP),
    "KEY_TASK": lua_string(TASK_INFIX),
    "KEY_REQUESTS": lua_string(REQUESTS_SUFFIX),
    "KEY_ISSUED": lua_string(ISSUED_SUFFIX),
    "KEY_ANSWERS": lua_string(ANSWERS_SUFFIX),
    "KEY_JOURNAL": lua_string(JOURNAL_SUFFIX),
    "KEY_GRANT": lua_string(GRANT_INFIX),
    "KEY_WORK": lua_string(WORK_SUFFIX),
    "KEY_LEASES": lua_string(LEASES_SUFFIX),
    "DIRECT_ENTRY": lua_string(DIRECT_ENTRY),
    "KEY_EVENTS": lua_string(EVENTS_SUFFIX),
    "KEY_SIGNALS": lua_string(SIGNALS_SUFFIX),
    "KEY_STATS": lua_string(STATS_SUFFIX),
    "KEY_BUSY": lua_string(BUSY_SUFFIX),
    "KEY_RING": lua_string(RING_SUFFIX),
    "KEY_PARKED": lua_string(PARKED_SUFFIX),
    "KEY_TENANTS": lua_string(TENANTS_SUFFIX),
    "KEY_QUEUE": lua_string(QUEUE_INFIX),
    "KEY_RUN": lua_string(RUN_INFIX),
    "KEY_OPEN": lua_string(OPEN_INFIX),
    "KEY_RATE": lua_string(RATE_INFIX),
    "KEY_PLAN": lua_string(PLAN_INFIX),
    "KEY_SEEN": lua_string(SEEN_SUFFIX),
    "KEY_REFUSED": lua_string(REFUSED_INFIX),
    "KEY_WAITING": lua_string(WAITING_SUFFIX),
    "KEY_WAITING_TENANT": lua_string(WAITING_INFIX),
    "STRIDE_UNIT": str(STRIDE_UNIT),
    "JITTER_PRIME": str(JITTER_PRIME),
    "JITTER_SALT": str(JITTER_SALT),
    "GOLDEN": repr(GOLDEN),
    "VTIME_FIELD": lua_string(VTIME_FIELD),
    "SIGNAL_NEWCOMER": lua_string(NEWCOMER_MARK),
    # How Redis writes a +inf score in a reply (a task kept forever in an open set).
    "SCORE_INF": lua_string("inf"),
    "TASK_ID_PATTERN": lua_string(_task_id_pattern()),
    "PARTITION_DIGITS": str(PARTITION_DIGITS),
    "RANDOM_CHARS": str(RANDOM_CHARS),
    "MAX_PARTITIONS": str(MAX_PARTITIONS),
    "LONG_FIELDS": _lua_set(lua_string(name) for name in sorted(LONG_FIELDS)),
    "PIECE_BYTES": str(PIECE_BYTES),
    "MAX_PIECES": str(MAX_PIECES),
    "STATS_CREATED": lua_string(CREATED_FIELD),
    "STATS_QUEUED": lua_string(QUEUED_FIELD),
    "STATS_CLAIM": lua_string(CLAIM_FIELD_PREFIX),
    "STATS_DEFERRED": lua_string(DEFERRED_FIELD),
    "STATS_REFUSED_QUOTA": lua_string(REFUSED_FIELDS["quota"]),
    "STATS_REFUSED_RATE": lua_string(REFUSED_FIELDS["rate"]),
    "REFUSALS_KEPT_MS": str(REFUSALS_KEPT_MS),
    "PICKUP_BOUNDS": "{" + ", ".join(str(ms) for ms in PICKUP_BOUNDS_MS) + "}",
    "PICKUP_FIELDS": "{" + ", ".join(lua_string(name) for name in PICKUP_FIELDS) + "}",
}
# Constants that are tables stay definitions (a literal table would be built at each
# use); the others are written in place of their names (join_source).
_SCALARS: Final = {name: value for name, value in CONSTANTS.items() if not value.startswith("{")}
_TABLES: Final = "".join(
    f"local {name} = {value}\n" for name, value in CONSTANTS.items() if value.startswith("{")
)

_FIELD_LIKE = re.compile(r"[a-z]{2,3}")
_STATUSES: Final = {status.value: status_constant(status) for status in TaskStatus}


def check_literals(where: str, source: str) -> None:
    """Refuse a status written as a literal (use ``ST_*``) and a record-field name
    (two or three lowercase letters) that :data:`RECORD_FIELDS` does not define."""
    for match in LUA_TOKENS.finditer(source):
        literal = match.group(1) if match.group(1) is not None else match.group(2)
        if literal is None:
            continue
        if literal in _STATUSES:
            raise InternalError(f"{where} writes {literal!r}: use {_STATUSES[literal]}")
        if _FIELD_LIKE.fullmatch(literal) and literal not in RECORD_FIELDS:
            raise InternalError(f"{where} uses {literal!r}, which is no record field")


# A script names the includes it uses in its header; an include names those it
# uses in its opening comment lines ("-- Includes: common").
_INCLUDES_LINE = re.compile(r"^[ \t]*(?:--)?[ \t]*Includes:[ \t]*(.*)$", re.M)
_LEADING_COMMENT = re.compile(r"\A(?:[ \t]*(?:--.*)?\n)*")
# A line of an include's code at the top level that neither defines nor closes.
_TOP_LEVEL_STATEMENT = re.compile(r"^(?!local\s|end\b)\S.*$", re.M)


@dataclass(frozen=True, slots=True)
class Include:
    """One file of ``lua/includes/``: what it needs and what it defines."""

    name: str
    text: str
    needs: tuple[str, ...]
    defines: frozenset[str]


def named_includes(where: str, comment: str) -> tuple[str, ...]:
    lines = _INCLUDES_LINE.findall(comment)
    if len(lines) > 1:
        raise InternalError(f"{where} has more than one Includes line")
    names = tuple(name.strip() for name in lines[0].split(",")) if lines else ()
    if any(not re.fullmatch(r"\w+", name) for name in names) or len(set(names)) < len(names):
        raise InternalError(f"{where} has a malformed Includes line")
    return names


def read_includes(directory: Path) -> dict[str, Include]:
    includes = {}
    for path in sorted((directory / "includes").glob("*.lua")):
        where = f"lua/includes/{path.name}"
        text = path.read_text(encoding="utf-8")
        check_literals(where, text)
        match = _LEADING_COMMENT.match(text)
        needs = named_includes(where, match.group(0) if match else "")
        text_code = code(text)
        statement = _TOP_LEVEL_STATEMENT.search(text_code)
        if statement is not None:  # join_source keeps or drops whole definitions
            raise InternalError(
                f"{where} holds only definitions at its top level, not {statement.group(0)!r}"
            )
        defines = frozenset(TOP_LEVEL_LOCAL.findall(text_code))
        includes[path.stem] = Include(path.stem, text, needs, defines)
    owners: dict[str, str] = {}
    for include in includes.values():
        for name in include.defines:
            if name in owners:
                raise InternalError(f"{name} is defined by both {owners[name]} and {include.name}")
            owners[name] = include.name
    for include in includes.values():
        check_uses(f"lua/includes/{include.name}.lua", include.text, include.needs, includes)
    return includes


def check_uses(where: str, text: str, named: tuple[str, ...], includes: dict[str, Include]) -> None:
    """Every name ``text`` takes from an include comes from one it names, and it
    uses something of each one it names."""
    text_code = code(text)
    used = set(USED_NAME.findall(text_code))
    own = set(TOP_LEVEL_LOCAL.findall(text_code))
    for name in named:
        if name not in includes:
            raise InternalError(f"{where} includes {name}, which lua/includes/ lacks")
    for include in includes.values():
        if where == f"lua/includes/{include.name}.lua":
            continue
        if own & include.defines:
            names = ", ".join(sorted(own & include.defines))
            raise InternalError(f"{where} redefines {names} of include {include.name}")
        taken = used & include.defines
        if taken and include.name not in named:
            names = ", ".join(sorted(taken))
            raise InternalError(f"{where} uses {names} of include {include.name}, not included")
        if not taken and include.name in named:
            raise InternalError(f"{where} includes {include.name} but uses nothing of it")


def resolve(named: Iterable[str], includes: dict[str, Include]) -> list[str]:
    """``named`` and what they need, each once, every include after those it needs."""
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            raise InternalError(f"includes need each other: {' -> '.join((*path, name))}")
        if name in order:
            return
        if name not in includes:
            raise InternalError(f"no include {name} in lua/includes/")
        for needed in includes[name].needs:
            visit(needed, (*path, name))
        order.append(name)

    for name in named:
        visit(name, ())
    return order


def assemble(
    named: Iterable[str],
    body: str,
    *,
    directory: Path | None = None,
    includes: dict[str, Include] | None = None,
) -> str:
    """A script's full source: the generated constants, the ``named`` includes
    (after the includes they need), then ``body``. The includes are those of
    ``directory`` (default ``lua_dir()``) unless given."""
    if includes is None:
        includes = read_includes(directory or lua_dir())
    return join_source(resolve(named, includes), body, includes)


def join_source(
    order: list[str],
    body: str,
    includes: dict[str, Include],
    where: str = "a script",
    constants: dict[str, str] | None = None,
) -> str:
    """The constants and the includes in ``order``, keeping only the definitions
    ``body`` uses (and those they use), then ``body``; refused (naming ``where``) if
    the result reads a name it does not define (:func:`~.lua_text.check_globals`).
    ``constants``: the script's own, after the shared ones (a group's layout).

    Why: Redis runs a script's whole text at every call, so each constant table and
    each helper closure is built again each time, used or not: a small script with
    every definition cost callgrind 60,000 instructions a call, and 31,000 with only
    those it used. Definitions keep their order, so each still comes before its uses.
    The scalar constants (numbers and strings, and the group's own) are not defined
    at all but written where they are read (:func:`~.lua_text.inline`): a helper that
    reads them then carries no upvalue for them.
    """
    own = constants or {}
    pieces = [*definitions(_TABLES)]
    for include in order:
        pieces += definitions(includes[include].text)
    source = inline(keep_used(pieces, body) + body, {**_SCALARS, **own})
    check_globals(where, source)
    return source
