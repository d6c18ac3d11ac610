"""The Lua scripts: loading, their KEYS/ARGV contracts, and calling them.

Each script in ``lua/`` opens with a ``--[[ ]]`` header that lists its KEYS
and ARGV. :data:`SPECS` restates those contracts in Python, and importing this
module checks the two agree, so a script and its callers cannot drift apart.
The loader prepends constants generated from Python (return codes, the
terminal statuses, the work group) and inlines ``lua/includes/``, so each
command is one self-contained script with one SHA, called with EVALSHA and
reloaded on NOSCRIPT.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from redis.exceptions import NoScriptError

from redis_tasks._codes import ReturnCode, error_for
from redis_tasks._errors import BackendError, InternalError, ReplicationError
from redis_tasks._status import TERMINAL_STATUSES

from .client import backend_errors
from .keys import WORK_GROUP
from .topology import Node, Topology

__all__ = ["SPECS", "Script", "ScriptRunner", "lua_dir", "scripts"]

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


class ScriptRunner:
    """Runs scripts on a topology: EVALSHA, NOSCRIPT reload, one deadline, error mapping.

    Redis errors of every kind become :class:`BackendError` here, the one
    boundary between the backend and the library's exception tree. Scripts are
    idempotent, so a lost reply can be retried: create finds its own task,
    finish accepts the identical transition again, claim returns the caller's
    own live lease, and the rest change nothing when repeated. Redirects,
    failovers and broken connections are retried by :meth:`Topology.call`
    within the call's one deadline (``timeout``).
    """

    __slots__ = ("_wait", "timeout", "topology", "wait_replicas")

    def __init__(
        self, topology: Topology, *, wait_replicas: int = 0, wait_timeout: float = 1.0
    ) -> None:
        self.topology = topology
        self.timeout = topology.timeout
        self.wait_replicas = wait_replicas
        wait_ms = max(1, int(wait_timeout * 1000))
        self._wait = (b"WAIT", wait_replicas, wait_ms) if wait_replicas > 0 else None

    async def run(
        self, name: str, keys: Sequence[str], args: Sequence[Arg], *, durable: bool = False
    ) -> list[Any]:
        """Run script ``name`` and return its reply after a successful code.

        Raises the mapped exception when the script answers a non-OK code.
        ``durable`` waits for ``wait_replicas`` replicas (if set) before returning.
        """
        reply = await self.run_raw(name, keys, args, durable=durable)
        code = reply[0]
        if code != ReturnCode.OK:
            detail = reply[1] if len(reply) > 1 and isinstance(reply[1], bytes) else None
            raise error_for(code, detail)
        return reply

    async def run_raw(
        self,
        name: str,
        keys: Sequence[str],
        args: Sequence[Arg],
        *,
        durable: bool = False,
        batch: bool = True,
    ) -> list[Any]:
        """Run script ``name`` on the node that owns its keys and return its reply,
        whatever its code.

        ``batch=False`` sends the call on a connection of its own at once instead
        of with the auto-pipeline's next batch: for a call that others wait on (a
        worker's claim).
        """
        script = scripts[name]
        wait = self._wait if durable else None
        topology = self.topology

        async def attempt(node: Node, asking: bool) -> Any:
            pipeline = node.pipeline
            command: tuple[Any, ...] = (b"EVALSHA", script.sha, len(keys), *keys, *args)
            for _ in range(2):
                try:
                    if batch:
                        return await pipeline.call(command, asking=asking, wait=wait)
                    return await pipeline.call_now(command, asking=asking, wait=wait)
                except NoScriptError:
                    # A restart, failover or SCRIPT FLUSH emptied the cache; EVAL runs
                    # the script and caches it again for the next EVALSHA.
                    command = (b"EVAL", script.source, len(keys), *keys, *args)
            raise BackendError("the script could not be loaded")

        # The first attempt is bounded by its batch's own deadline, which saves a
        # timer per call at tens of thousands of calls a second; retries get what
        # is left of the call's one deadline.
        deadline = asyncio.get_running_loop().time() + self.timeout
        with backend_errors:
            reply = await topology.call(
                topology.slot(keys[0]), attempt, deadline=deadline, timed=False
            )
        if wait is not None:
            reply, acked = reply
            # Only a script that answered OK wrote something for the replicas to
            # confirm. Any other answer (a stale fence, a terminal task) changed
            # nothing: it reaches the caller as what it is, not as unconfirmed.
            wrote = isinstance(reply, list) and bool(reply) and reply[0] == ReturnCode.OK
            if wrote and acked < self.wait_replicas:
                raise ReplicationError(
                    f"only {acked} of {self.wait_replicas} replicas confirmed the write in time"
                )
        if not isinstance(reply, list) or not reply or not isinstance(reply[0], int):
            raise InternalError("unexpected script reply")
        return reply
