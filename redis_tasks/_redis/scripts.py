"""The Lua scripts: the catalogue of their KEYS/ARGV contracts, and loading them.

Each script in ``lua/`` opens with a ``--[[ ]]`` header that lists its KEYS
and ARGV. :data:`SPECS` restates those contracts in Python, and importing this
module checks the two agree, so a script and its callers cannot drift apart.
The loader prepends constants generated from Python (return codes, the
terminal statuses, the work group) and inlines ``lua/includes/``, so each
command is one self-contained script with one SHA, called with EVALSHA and
reloaded on NOSCRIPT (see :mod:`.runner`, which runs them).
"""

from __future__ import annotations

import hashlib
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
from redis_tasks._status import TERMINAL_STATUSES, TaskStatus

from .keys import (
    ANSWERS_SUFFIX,
    EVENTS_SUFFIX,
    GRANT_INFIX,
    ISSUED_SUFFIX,
    JOURNAL_SUFFIX,
    REQUESTS_SUFFIX,
    TASK_INFIX,
    WORK_GROUP,
    WORK_SUFFIX,
)

__all__ = [
    "CONSTANTS",
    "SPECS",
    "Arg",
    "Script",
    "Spec",
    "assemble",
    "check_literals",
    "lua_dir",
    "scripts",
]

_INCLUDES: Final = ("common", "keys", "claim")
_HEADER = re.compile(r"\A--\[\[(.*?)\]\]", re.S)
_SLOT = re.compile(r"^\s+(\d+)(\.\.)?\s+(\w+)", re.M)

Arg = str | bytes | int


def lua_dir() -> Path:
    """Where the scripts are: inside the installed package, or the source tree's ``lua/``."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "lua"
    return packaged if packaged.is_dir() else package.parent / "lua"


@dataclass(frozen=True, slots=True)
class Spec:
    """A script's KEYS and ARGV names; ``variadic`` names trailing repeated ARGV."""

    keys: tuple[str, ...]
    argv: tuple[str, ...]
    variadic: str | None = None


#: The contract of every script, checked against its header at import.
SPECS: Final[dict[str, Spec]] = {
    "create": Spec(
        ("task", "work", "events", "grant"),
        (
            "task_id",
            "binding",
            "origin",
            "payload",
            "ttl_ms",
            "poll_ms",
            "metadata",
            "events",
        ),
    ),
    "find": Spec(("task", "requests", "grant"), ("binding",)),
    "update": Spec(
        ("task", "requests", "answers", "journal", "events", "grant"),
        ("task_id", "binding", "events"),
        variadic="answers",
    ),
    "request_cancel": Spec(("task", "events", "grant"), ("task_id", "binding", "events")),
    "set_status": Spec(
        ("task", "requests", "events"),
        ("task_id", "fence", "has_message", "message", "events"),
    ),
    "request_input": Spec(
        ("task", "requests", "issued", "answers", "journal", "events"),
        ("task_id", "fence", "has_message", "message", "events"),
        variadic="requests",
    ),
    "take_answers": Spec(("task", "answers"), ("fence",)),
    "finish": Spec(
        ("task", "requests", "issued", "answers", "journal", "work", "events"),
        (
            "task_id",
            "fence",
            "status",
            "has_message",
            "message",
            "outcome_field",
            "outcome",
            "operation",
            "events",
        ),
    ),
    "cancel_requested": Spec(("task",), ("fence",)),
    "claim": Spec(
        ("task", "requests", "issued", "answers", "journal", "work", "events"),
        (
            "task_id",
            "entry_id",
            "consumer",
            "lease_ms",
            "max_attempts",
            "poison_error",
            "events",
        ),
    ),
    "claim_next": Spec(
        ("work", "events"),
        (
            "tag",
            "consumer",
            "count",
            "lease_ms",
            "max_attempts",
            "poison_error",
            "events",
        ),
    ),
    "renew": Spec(("task", "work"), ("fence", "consumer", "lease_ms")),
    "release": Spec(("task", "work"), ("task_id", "fence")),
    "requeue": Spec(("task", "work"), ("task_id", "entry_id")),
}


def _section(header: str, name: str) -> list[tuple[int, bool, str]]:
    match = re.search(rf"^\s*{name}:\n((?:\s{{3,}}.*\n?)*)", header, re.M)
    if match is None:
        raise InternalError(f"script header lacks a {name} section")
    return [(int(n), bool(dots), word) for n, dots, word in _SLOT.findall(match.group(1))]


def _check_header(name: str, source: str, spec: Spec) -> None:
    header = _HEADER.match(source)
    if header is None:
        raise InternalError(f"lua/{name}.lua does not open with a --[[ ]] header")
    keys = _section(header.group(1), "KEYS")
    argv = _section(header.group(1), "ARGV")
    declared_keys = tuple(word for _, _, word in keys)
    fixed_argv = tuple(word for _, dots, word in argv if not dots)
    variadic = [word for _, dots, word in argv if dots]
    numbers_ok = [n for n, _, _ in keys] == list(range(1, len(keys) + 1)) and [
        n for n, _, _ in argv
    ] == list(range(1, len(argv) + 1))
    if (
        not numbers_ok
        or declared_keys != spec.keys
        or fixed_argv != spec.argv
        or variadic != ([spec.variadic] if spec.variadic else [])
    ):
        raise InternalError(f"lua/{name}.lua header disagrees with its Python contract")


def _lua_string(text: str) -> str:
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
    partition's leading zero and bound after the match.
    """
    others = "".join(f"%{c}" if c in _LUA_MAGIC else c for c in ALPHABET_OTHERS)
    char = f"[{''.join(ALPHABET_RANGES)}{others}]"
    return f"^([0-9]+)%.{char * RANDOM_CHARS}$"


def _status_constant(status: TaskStatus) -> str:
    return f"ST_{status.name}"


#: Constants every script gets, generated from the Python definitions.
CONSTANTS: Final[dict[str, str]] = {
    **{f"RC_{code.name}": str(code.value) for code in ReturnCode},
    **{_status_constant(status): _lua_string(status.value) for status in TaskStatus},
    "TERMINAL": _lua_set(sorted(_status_constant(status) for status in TERMINAL_STATUSES)),
    "WORK_GROUP": _lua_string(WORK_GROUP),
    "KEY_TASK": _lua_string(TASK_INFIX),
    "KEY_REQUESTS": _lua_string(REQUESTS_SUFFIX),
    "KEY_ISSUED": _lua_string(ISSUED_SUFFIX),
    "KEY_ANSWERS": _lua_string(ANSWERS_SUFFIX),
    "KEY_JOURNAL": _lua_string(JOURNAL_SUFFIX),
    "KEY_GRANT": _lua_string(GRANT_INFIX),
    "KEY_WORK": _lua_string(WORK_SUFFIX),
    "KEY_EVENTS": _lua_string(EVENTS_SUFFIX),
    "TASK_ID_PATTERN": _lua_string(_task_id_pattern()),
    "PARTITION_DIGITS": str(PARTITION_DIGITS),
    "MAX_PARTITIONS": str(MAX_PARTITIONS),
    "LONG_FIELDS": _lua_set(_lua_string(name) for name in sorted(LONG_FIELDS)),
    "PIECE_BYTES": str(PIECE_BYTES),
    "MAX_PIECES": str(MAX_PIECES),
}
_PRELUDE: Final = "".join(f"local {name} = {value}\n" for name, value in CONSTANTS.items())

# Comments and string literals of Lua source, in one pass so that neither hides
# in the other; only single-line strings are used in our scripts.
_LUA_TOKENS = re.compile(
    r"--\[\[.*?\]\]|--[^\n]*|'((?:\\.|[^'\\\n])*)'|\"((?:\\.|[^\"\\\n])*)\"", re.S
)
_FIELD_LIKE = re.compile(r"[a-z]{2,3}")
_STATUSES: Final = {status.value: _status_constant(status) for status in TaskStatus}


def _code(source: str) -> str:
    """``source`` without comments and with every string literal emptied."""
    return _LUA_TOKENS.sub(lambda m: "''" if m.group(0)[0] in "'\"" else " ", source)


def check_literals(where: str, source: str) -> None:
    """Refuse a status written as a literal (use ``ST_*``) and a record-field name
    (two or three lowercase letters) that :data:`RECORD_FIELDS` does not define."""
    for match in _LUA_TOKENS.finditer(source):
        literal = match.group(1) if match.group(1) is not None else match.group(2)
        if literal is None:
            continue
        if literal in _STATUSES:
            raise InternalError(f"{where} writes {literal!r}: use {_STATUSES[literal]}")
        if _FIELD_LIKE.fullmatch(literal) and literal not in RECORD_FIELDS:
            raise InternalError(f"{where} uses {literal!r}, which is no record field")


@dataclass(frozen=True, slots=True)
class Script:
    """One loaded script: its full source (with includes) and SHA1."""

    name: str
    spec: Spec
    source: str
    sha: str


def _include(directory: Path, name: str) -> str:
    text = (directory / "includes" / f"{name}.lua").read_text(encoding="utf-8")
    check_literals(f"lua/includes/{name}.lua", text)
    return text


def assemble(includes: Iterable[str], body: str, *, directory: Path | None = None) -> str:
    """A script's full source: the generated constants, ``includes``, then ``body``."""
    directory = directory or lua_dir()
    return _PRELUDE + "".join(_include(directory, name) for name in includes) + body


def _load(directory: Path, name: str, spec: Spec) -> Script:
    body = (directory / f"{name}.lua").read_text(encoding="utf-8")
    _check_header(name, body, spec)
    check_literals(f"lua/{name}.lua", body)
    source = assemble(_INCLUDES, body, directory=directory)
    return Script(name, spec, source, hashlib.sha1(source.encode()).hexdigest())  # noqa: S324


def _load_all() -> dict[str, Script]:
    directory = lua_dir()
    return {name: _load(directory, name, spec) for name, spec in SPECS.items()}


#: Every script, loaded and checked once at import.
scripts: Final[dict[str, Script]] = _load_all()
