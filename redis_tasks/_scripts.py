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
import contextlib
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from redis.asyncio import RedisCluster
from redis.exceptions import AskError, MovedError, NoScriptError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from ._client import CLIENT_ERRORS, Client
from ._codes import ReturnCode, error_for
from ._errors import BackendError, InternalError, RedisTasksError, ReplicationError
from ._keys import WORK_GROUP
from ._pipeline import AutoPipeline
from ._status import TERMINAL_STATUSES

__all__ = ["SPECS", "Script", "ScriptRunner", "lua_dir", "scripts"]

_INCLUDES: Final = ("common", "claim")
# Failures after which the same call may simply be made again: a broken
# connection, a slot that moved, or the cluster client's connection state torn
# down under it during a topology change (AttributeError inside redis-py).
_RETRY_ONCE: Final = (RedisConnectionError, MovedError, AskError, AttributeError)
_HEADER = re.compile(r"\A--\[\[(.*?)\]\]", re.S)
_SLOT = re.compile(r"^\s+(\d+)(\.\.)?\s+(\w+)", re.M)

Arg = str | bytes | int


def lua_dir() -> Path:
    """Where the scripts are: inside the installed package, or the source tree's ``lua/``."""
    here = Path(__file__).resolve().parent
    packaged = here / "lua"
    return packaged if packaged.is_dir() else here.parent / "lua"


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
            "endpoint",
            "binding",
            "origin",
            "payload",
            "ttl_ms",
            "poll_ms",
            "metadata",
            "events_maxlen",
        ),
    ),
    "find": Spec(("task", "requests", "grant"), ("endpoint", "binding")),
    "update": Spec(
        ("task", "requests", "answers", "journal", "events", "grant"),
        ("task_id", "endpoint", "binding", "events_maxlen"),
        variadic="answers",
    ),
    "request_cancel": Spec(
        ("task", "events", "grant"), ("task_id", "endpoint", "binding", "events_maxlen")
    ),
    "set_status": Spec(
        ("task", "requests", "events"),
        ("task_id", "fence", "has_message", "message", "events_maxlen"),
    ),
    "request_input": Spec(
        ("task", "requests", "issued", "answers", "journal", "events"),
        ("task_id", "fence", "has_message", "message", "events_maxlen"),
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
            "events_maxlen",
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
            "events_maxlen",
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
            "events_maxlen",
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
    """Runs scripts on one Redis client: EVALSHA, NOSCRIPT reload, timeout, error mapping.

    Redis errors of every kind become :class:`BackendError` here, the one
    boundary between the backend and the library's exception tree. Scripts are
    idempotent, so a lost reply can be retried: create finds its own task,
    finish accepts the identical transition again, claim returns the caller's
    own live lease, and the rest change nothing when repeated.
    """

    __slots__ = ("_client", "_pipeline", "timeout", "wait_replicas", "wait_timeout_ms")

    def __init__(
        self, client: Client, timeout: float, *, wait_replicas: int = 0, wait_timeout: float = 1.0
    ) -> None:
        self.timeout = timeout
        self._pipeline: AutoPipeline | None = None
        self.client = client
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = max(1, int(wait_timeout * 1000))

    @property
    def client(self) -> Client:
        """The client scripts run on."""
        return self._client

    @client.setter
    def client(self, client: Client) -> None:
        self._client = client
        # Standalone calls are auto-pipelined; the cluster client routes each call
        # to its slot's node itself (and follows MOVED/ASK), so it sends them one by one.
        self._pipeline = (
            None if isinstance(client, RedisCluster) else AutoPipeline(client, self.timeout)
        )

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
        """Run script ``name`` and return its reply, whatever its code.

        A broken connection (the server restarted, or killed our client) is
        retried once on a fresh one: every script is written to be safe to run
        again after a reply was lost. ``batch=False`` sends the call on a
        connection of its own at once instead of with the auto-pipeline's next
        batch: for a call that others wait on (a worker's batch claim).
        """
        script = scripts[name]
        waits = durable and self.wait_replicas > 0
        # An auto-pipelined call is bounded by its batch's deadline; saving a timer
        # per call matters at tens of thousands of calls a second.
        bounded = self._pipeline is not None and batch and not waits
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        try:
            async with contextlib.nullcontext() if bounded else asyncio.timeout_at(deadline):
                try:
                    reply = await self._attempt(script, keys, args, waits, batch)
                except _RETRY_ONCE:
                    # A broken connection, or a slot that moved under a WAIT call.
                    # The retry gets what is left of the call's one timeout: a
                    # batched call's own deadline would start afresh, and a
                    # connection killed late in a stall then doubled the wait.
                    async with asyncio.timeout_at(deadline):
                        reply = await self._attempt(script, keys, args, waits, batch)
        except TimeoutError as exc:
            raise BackendError("Redis call timed out") from exc
        except RedisTasksError:
            raise  # already ours (ReplicationError, BackendError)
        except CLIENT_ERRORS as exc:
            raise BackendError("Redis call failed") from exc
        if not isinstance(reply, list) or not reply or not isinstance(reply[0], int):
            raise InternalError("unexpected script reply")
        return reply

    async def _attempt(
        self, script: Script, keys: Sequence[str], args: Sequence[Arg], waits: bool, batch: bool
    ) -> Any:
        if waits:
            return await self._call_and_wait(script, keys, args)
        return await self._call(script, keys, args, batch)

    async def _call(
        self, script: Script, keys: Sequence[str], args: Sequence[Arg], batch: bool = True
    ) -> Any:
        try:
            if self._pipeline is not None and batch:
                return await self._pipeline.call(("EVALSHA", script.sha, len(keys), *keys, *args))
            return await self.client.evalsha(script.sha, len(keys), *keys, *args)
        except NoScriptError:
            # A restart, failover or SCRIPT FLUSH emptied the cache; EVAL runs
            # the script and caches it again for the next EVALSHA.
            return await self.client.eval(script.source, len(keys), *keys, *args)

    async def _call_and_wait(self, script: Script, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """Run the script, then ``WAIT`` on the same connection (WAIT covers only the
        writes of its own connection), on the node that owns the keys."""
        client = self.client
        if isinstance(client, RedisCluster):
            node = client.get_node_from_key(keys[0])
            if node is None:
                raise BackendError("no node serves this key")
            connection = node.acquire_connection()
            try:
                reply, acked = await self._send_with_wait(connection, script, keys, args)
            except MovedError:
                # The slot moved (failover, resharding): learn where it lives now.
                await client.nodes_manager.initialize()
                raise
            finally:
                node.release(connection)
        else:
            pool = client.connection_pool
            connection = await pool.get_connection()  # type: ignore[no-untyped-call]
            try:
                reply, acked = await self._send_with_wait(connection, script, keys, args)
            finally:
                await pool.release(connection)
        # Only a script that answered OK wrote something for the replicas to confirm.
        # Any other answer (a stale fence, a terminal task) changed nothing: it must
        # reach the caller as what it is, not as an unconfirmed write.
        wrote = isinstance(reply, list) and bool(reply) and reply[0] == ReturnCode.OK
        if wrote and acked < self.wait_replicas:
            raise ReplicationError(
                f"only {acked} of {self.wait_replicas} replicas confirmed the write in time"
            )
        return reply

    async def _send_with_wait(
        self, connection: Any, script: Script, keys: Sequence[str], args: Sequence[Arg]
    ) -> tuple[Any, int]:
        wait = ("WAIT", self.wait_replicas, self.wait_timeout_ms)
        for command in (("EVALSHA", script.sha), ("EVAL", script.source)):
            try:
                await connection.send_packed_command(
                    connection.pack_commands([(*command, len(keys), *keys, *args), wait])
                )
                replies: list[Any] = []
                for _ in range(2):
                    try:
                        replies.append(await connection.read_response())
                    except ResponseError as exc:  # read both replies to stay in sync
                        replies.append(exc)
            except BaseException:
                # A half-read connection must not go back to the pool as it is.
                await connection.disconnect()
                raise
            reply, acked = replies
            if isinstance(reply, NoScriptError):
                continue  # the cache was emptied (restart, failover): EVAL loads it
            if isinstance(reply, ResponseError):
                raise reply
            if isinstance(acked, ResponseError):
                raise acked
            return reply, int(acked)
        raise BackendError("the script could not be loaded")
