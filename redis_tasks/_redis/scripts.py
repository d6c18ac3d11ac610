"""The Lua scripts: the catalogue of their KEYS/ARGV contracts, and loading them.

Each script in ``lua/`` opens with a ``--[[ ]]`` header that lists its KEYS
and ARGV. Its *binding* here, a function of the same name, restates that
contract as keyword-only parameters and makes the call from named arguments:
``runner.run(scripts.find(task=..., requests=..., grant=..., binding=...))``.
Importing this module checks each binding against its header and its body
against its parameters (:data:`SPECS` is the contract both declare), so a
script and its callers cannot drift apart, and a call with a missing, extra or
misnamed argument fails where it is made (for mypy too).

The loader prepends :data:`CONSTANTS`, generated from the Python definitions
(return codes ``RC_*``, statuses ``ST_*`` and ``TERMINAL``, key name parts
``KEY_*``, the task-ID pattern, the long record fields...), so Lua holds no
copies of them; a status written as a literal, or a record-field name that
``redis_tasks._record.RECORD_FIELDS`` does not define, is refused at import.

Then come the includes (``lua/includes/``) the script names in its header
(``Includes: common, claim``), each after the includes it names in its own
opening comment. A script (or include) that uses a helper of an include it
does not name, names one it does not use, or redefines a helper is refused
at import. Each command is so one self-contained script with one SHA, called
with EVALSHA and reloaded on NOSCRIPT (see :mod:`.runner`, which runs them).
"""

from __future__ import annotations

import hashlib
import inspect
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

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
    "Call",
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
    "find",
    "finish",
    "load_all",
    "lua_dir",
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

_HEADER = re.compile(r"\A--\[\[(.*?)\]\]", re.S)
_SLOT = re.compile(r"^\s+(\d+)(\.\.)?\s+(\w+)", re.M)

Arg = str | bytes | int
_BindingT = TypeVar("_BindingT", bound="Callable[..., Call]")


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


#: A bound script call: the script, its KEYS and its ARGV, in the header's order.
Call = tuple["Script", tuple[str, ...], tuple[Arg, ...]]
_Binding = Callable[..., Call]
_BINDINGS: dict[str, _Binding] = {}


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
    task: str,
    work: str,
    events: str,
    grant: str,
    task_id: str,
    binding: str,
    origin: bytes,
    payload: bytes,
    ttl_ms: int,
    poll_ms: int,
    metadata: bytes,
    event_opts: str,
) -> Call:
    return (
        scripts["create"],
        (task, work, events, grant),
        (task_id, binding, origin, payload, ttl_ms, poll_ms, metadata, event_opts),
    )


@_binding
def find(*, task: str, requests: str, grant: str, binding: str) -> Call:
    return scripts["find"], (task, requests, grant), (binding,)


@_binding
def update(
    *,
    task: str,
    requests: str,
    answers: str,
    journal: str,
    events: str,
    grant: str,
    task_id: str,
    binding: str,
    event_opts: str,
    responses: Sequence[Arg],
) -> Call:
    return (
        scripts["update"],
        (task, requests, answers, journal, events, grant),
        (task_id, binding, event_opts, *responses),
    )


@_binding
def request_cancel(
    *, task: str, events: str, grant: str, task_id: str, binding: str, event_opts: str
) -> Call:
    return scripts["request_cancel"], (task, events, grant), (task_id, binding, event_opts)


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
        (task, requests, issued, answers, journal, work, events),
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
        (task, requests, issued, answers, journal, work, events),
        (task_id, entry_id, consumer, lease_ms, max_attempts, poison_error, event_opts),
    )


@_binding
def claim_next(
    *,
    work: str,
    events: str,
    tag: str,
    consumer: str,
    count: int,
    lease_ms: int,
    max_attempts: int,
    poison_error: bytes,
    event_opts: str,
) -> Call:
    return (
        scripts["claim_next"],
        (work, events),
        (tag, consumer, count, lease_ms, max_attempts, poison_error, event_opts),
    )


@_binding
def renew(*, task: str, work: str, fence: bytes, consumer: str, lease_ms: int) -> Call:
    return scripts["renew"], (task, work), (fence, consumer, lease_ms)


@_binding
def release(*, task: str, work: str, task_id: str, fence: bytes) -> Call:
    return scripts["release"], (task, work), (task_id, fence)


@_binding
def requeue(*, task: str, work: str, task_id: str, entry_id: str) -> Call:
    return scripts["requeue"], (task, work), (task_id, entry_id)


def _section(header: str, name: str) -> list[tuple[int, bool, str]]:
    match = re.search(rf"^\s*{name}:\n((?:\s{{3,}}.*\n?)*)", header, re.M)
    if match is None:
        raise InternalError(f"script header lacks a {name} section")
    return [(int(n), bool(dots), word) for n, dots, word in _SLOT.findall(match.group(1))]


def _parse_header(name: str, source: str) -> tuple[Spec, str]:
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
    spec = Spec(
        tuple(word for _, _, word in keys),
        tuple(word for _, dots, word in argv if not dots),
        variadic[0] if variadic else None,
    )
    return spec, header.group(1)


def _check_header(name: str, source: str, spec: Spec) -> None:
    """Refuse ``source`` unless its header declares ``spec``."""
    if _parse_header(name, source)[0] != spec:
        raise InternalError(f"lua/{name}.lua header disagrees with its Python contract")


def _parameters(binding: _Binding) -> list[inspect.Parameter]:
    return list(inspect.signature(binding).parameters.values())


def _check_signature(name: str, binding: _Binding, spec: Spec) -> None:
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


def check_binding(binding: _Binding, script: Script) -> None:
    """Refuse a binding that does not return ``script`` with each argument in its
    place: called with every argument its own name, it must answer the header."""
    spec = script.spec
    arguments: dict[str, Any] = {p.name: p.name for p in _parameters(binding)}
    if spec.variadic:
        arguments[spec.variadic] = (f"{spec.variadic}..",)
    trailing = (f"{spec.variadic}..",) if spec.variadic else ()
    try:
        call = binding(**arguments)
    except TypeError as exc:
        raise InternalError(f"the binding of {script.name} does not take its contract") from exc
    if call[0] is not script or call[1:] != (spec.keys, (*spec.argv, *trailing)):
        raise InternalError(f"the binding of {script.name} misplaces its arguments")


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
    """One loaded script: the includes it got, its full source and SHA1."""

    name: str
    spec: Spec
    includes: tuple[str, ...]
    source: str
    sha: str


# A script names the includes it uses in its header; an include names those it
# uses in its opening comment lines ("-- Includes: common").
_INCLUDES_LINE = re.compile(r"^[ \t]*(?:--)?[ \t]*Includes:[ \t]*(.*)$", re.M)
_LEADING_COMMENT = re.compile(r"\A(?:[ \t]*(?:--.*)?\n)*")
_TOP_LEVEL_LOCAL = re.compile(r"^local\s+(?:function\s+)?([A-Za-z_]\w*)", re.M)
_NAME = re.compile(r"(?<![.:\w])([A-Za-z_]\w*)")


@dataclass(frozen=True, slots=True)
class Include:
    """One file of ``lua/includes/``: what it needs and what it defines."""

    name: str
    text: str
    needs: tuple[str, ...]
    defines: frozenset[str]


def _named_includes(where: str, comment: str) -> tuple[str, ...]:
    lines = _INCLUDES_LINE.findall(comment)
    if len(lines) > 1:
        raise InternalError(f"{where} has more than one Includes line")
    names = tuple(name.strip() for name in lines[0].split(",")) if lines else ()
    if any(not re.fullmatch(r"\w+", name) for name in names) or len(set(names)) < len(names):
        raise InternalError(f"{where} has a malformed Includes line")
    return names


def _read_includes(directory: Path) -> dict[str, Include]:
    includes = {}
    for path in sorted((directory / "includes").glob("*.lua")):
        where = f"lua/includes/{path.name}"
        text = path.read_text(encoding="utf-8")
        check_literals(where, text)
        match = _LEADING_COMMENT.match(text)
        needs = _named_includes(where, match.group(0) if match else "")
        defines = frozenset(_TOP_LEVEL_LOCAL.findall(_code(text)))
        includes[path.stem] = Include(path.stem, text, needs, defines)
    owners: dict[str, str] = {}
    for include in includes.values():
        for name in include.defines:
            if name in owners:
                raise InternalError(f"{name} is defined by both {owners[name]} and {include.name}")
            owners[name] = include.name
    for include in includes.values():
        _check_uses(f"lua/includes/{include.name}.lua", include.text, include.needs, includes)
    return includes


def _check_uses(
    where: str, text: str, named: tuple[str, ...], includes: dict[str, Include]
) -> None:
    """Every name ``text`` takes from an include comes from one it names, and it
    uses something of each one it names."""
    code = _code(text)
    used = set(_NAME.findall(code))
    own = set(_TOP_LEVEL_LOCAL.findall(code))
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


def _resolve(named: Iterable[str], includes: dict[str, Include]) -> list[str]:
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
        includes = _read_includes(directory or lua_dir())
    return _assemble(_resolve(named, includes), body, includes)


def _assemble(order: list[str], body: str, includes: dict[str, Include]) -> str:
    return _PRELUDE + "".join(includes[name].text for name in order) + body


def _load(directory: Path, name: str, includes: dict[str, Include]) -> Script:
    where = f"lua/{name}.lua"
    body = (directory / f"{name}.lua").read_text(encoding="utf-8")
    spec, header = _parse_header(name, body)
    _check_signature(name, _BINDINGS[name], spec)
    check_literals(where, body)
    named = _named_includes(where, header)
    _check_uses(where, body, named, includes)
    order = _resolve(named, includes)
    source = _assemble(order, body, includes)
    sha = hashlib.sha1(source.encode()).hexdigest()  # noqa: S324
    return Script(name, spec, tuple(order), source, sha)


def load_all(directory: Path | None = None) -> dict[str, Script]:
    """Load and check every script that has a binding, from ``directory`` (``lua_dir()``)."""
    directory = directory or lua_dir()
    includes = _read_includes(directory)
    return {name: _load(directory, name, includes) for name in _BINDINGS}


#: Every script, loaded and checked once at import.
scripts: Final[dict[str, Script]] = load_all()
for _name, _script in scripts.items():
    check_binding(_BINDINGS[_name], _script)

#: The contract of every script, as its header and its binding declare it.
SPECS: Final[dict[str, Spec]] = {name: script.spec for name, script in scripts.items()}
