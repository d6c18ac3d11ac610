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
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from redis_tasks._codes import ReturnCode
from redis_tasks._errors import InternalError
from redis_tasks._status import TERMINAL_STATUSES

from .keys import WORK_GROUP

__all__ = ["SPECS", "Arg", "Script", "Spec", "lua_dir", "scripts"]

_INCLUDES: Final = ("common", "claim")
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


def _constants() -> str:
    lines = [f"local RC_{code.name} = {code.value}" for code in ReturnCode]
    terminal = ", ".join(f"{status.value} = true" for status in sorted(TERMINAL_STATUSES))
    lines.append(f"local TERMINAL = {{{terminal}}}")
    lines.append(f"local WORK_GROUP = '{WORK_GROUP}'")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class Script:
    """One loaded script: its full source (with includes) and SHA1."""

    name: str
    spec: Spec
    source: str
    sha: str


def _load(directory: Path, name: str, spec: Spec) -> Script:
    body = (directory / f"{name}.lua").read_text(encoding="utf-8")
    _check_header(name, body, spec)
    includes = "".join(
        (directory / "includes" / f"{include}.lua").read_text(encoding="utf-8")
        for include in _INCLUDES
    )
    source = _constants() + includes + body
    return Script(name, spec, source, hashlib.sha1(source.encode()).hexdigest())  # noqa: S324


def _load_all() -> dict[str, Script]:
    directory = lua_dir()
    return {name: _load(directory, name, spec) for name, spec in SPECS.items()}


#: Every script, loaded and checked once at import.
scripts: Final[dict[str, Script]] = _load_all()
