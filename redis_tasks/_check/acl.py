"""Whether the connected user may run every command the library needs, on keys under the prefix.

:data:`ACL_COMMANDS` is the one list of those commands: the documented ACL line
must name exactly these (a test holds the two together). Each command has a
probe here, its arguments on scratch keys under ``{<prefix>:check}``. A node is
asked first with ``ACL DRYRUN``, which runs nothing; that needs the right to
run ``ACL DRYRUN``, which an application's user seldom has, so where it is
refused (or missing) each probe is *run* on the scratch keys instead and a
``NOPERM`` reply marks a refusal. Any other reply, an error included, means the
ACL let the command through: Redis checks the ACL before it looks at keys,
slots (``MOVED``) or arguments. The scratch keys are deleted afterwards.

The probes talk to raw connections, so no client library interprets a reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from redis.asyncio.connection import AbstractConnection
from redis.exceptions import NoPermissionError, ResponseError

from redis_tasks._redis.scripts import scripts

__all__ = [
    "ACL_COMMANDS",
    "CLUSTER_ONLY",
    "INSPECTION_SCRIPTS",
    "INSPECT_ONLY",
    "NEWER",
    "SCRIPT_COMMANDS",
    "SHARD_CHANNELS",
    "Denial",
    "ProbeKeys",
    "by_dryrun",
    "by_probe",
    "needed",
    "probe_args",
]

#: Every command the library runs (directly or inside its scripts), in the
#: documented order: the ACL line of the site's "Plugging into your Redis" page
#: (docs/operations/redis-layout.md) grants exactly these.
ACL_COMMANDS: Final[tuple[str, ...]] = (
    *("hello", "ping", "info", "config|get"),
    *("cluster|slots", "cluster|shards", "cluster|nodes", "asking"),
    *("script|load", "evalsha", "eval", "wait"),
    *("xadd", "xread", "xreadgroup", "xack", "xdel", "xclaim", "xautoclaim", "xpending"),
    *("xrevrange", "xgroup|create", "xgroup|delconsumer", "xinfo|consumers", "xinfo|stream"),
    *("spublish", "ssubscribe", "time", "exists", "del", "set"),
    *("hmget", "hset", "hdel", "hgetall", "hkeys", "hincrby", "hlen", "xlen", "xrange"),
    *("xinfo|groups", "pexpireat", "get", "hsetnx", "persist"),
    *("rpush", "lpush", "lpop", "llen", "lindex", "lrem", "hget"),
    *("zadd", "zrem", "zcard", "zcount", "zscore", "zrange", "zrangebyscore", "zremrangebyscore"),
)
#: Needed on a Redis Cluster only.
#: The shard channels' commands: without them a cluster still works, its events read
#: with one blocking XREAD per partition (so a refusal is a warning).
SHARD_CHANNELS: Final = frozenset({"spublish", "ssubscribe", "xinfo|stream"})
#: Needed on a Redis Cluster only.
CLUSTER_ONLY: Final = frozenset(
    {"cluster|slots", "cluster|shards", "cluster|nodes", "asking", *SHARD_CHANNELS}
)
#: The scripts only inspection runs (``inspect``, ``tenants``, the dashboard).
INSPECTION_SCRIPTS: Final = frozenset({"inspect_queue", "inspect_task", "inspect_tenants"})
#: What every other script calls, read from the scripts themselves (each
#: :attr:`~redis_tasks._redis.script_loading.Script`'s ``commands``): a user refused
#: any of these cannot run tasks, whatever else it may run.
SCRIPT_COMMANDS: Final = frozenset(
    command
    for script in scripts.values()
    if script.name not in INSPECTION_SCRIPTS
    for command in script.commands
)
#: What inspection and a worker's backlog gauges send themselves, outside scripts.
_INSPECTION_DIRECT: Final = frozenset({"xlen", "xpending", "hget", "zcard", "zcount"})
#: What a worker sends itself for its housekeeping (consumers stale or left behind).
_HOUSEKEEPING: Final = frozenset({"xpending", "xinfo|consumers"})
#: Only ``inspect``, the dashboard and a worker's backlog gauges use these: what
#: inspection runs, less what the task scripts and housekeeping run. Listed by hand,
#: the set named commands the claim and dispatch scripts call (an operator who
#: followed the warning broke dispatch).
INSPECT_ONLY: Final = (
    (
        frozenset(command for name in INSPECTION_SCRIPTS for command in scripts[name].commands)
        | _INSPECTION_DIRECT
    )
    - SCRIPT_COMMANDS
    - _HOUSEKEEPING
)
#: Needed from a server version on (7.2, and Valkey, which reports 7.2.4): redis-py
#: names its connections with ``CLIENT SETINFO``, and a refusal leaves an ACL LOG entry.
NEWER: Final[dict[str, tuple[int, int]]] = {"client|setinfo": (7, 2)}

#: What a denial was about: the command itself, a key, or a channel.
Kind = Literal["command", "key", "channel"]
# The script the EVAL probes run: it touches nothing.
_LUA: Final = "return 1"
_LUA_SHA: Final = hashlib.sha1(_LUA.encode()).hexdigest()  # noqa: S324 - Redis's script ID
# A stream entry that never exists: the probes that name one change nothing.
_NO_ENTRY: Final = "0-1"


def _soon() -> int:
    # A minute from now, in Unix milliseconds: a scratch key left behind expires then.
    return int(time.time() * 1000) + 60_000


def needed(*, cluster: bool, version: tuple[int, int] | None) -> list[str]:
    """The commands a user needs on this deployment (``version`` ``None``: unknown)."""
    commands = [c for c in ACL_COMMANDS if cluster or c not in CLUSTER_ONLY]
    newer = [c for c, since in NEWER.items() if version is not None and version >= since]
    return commands + newer


@dataclass(frozen=True)
class ProbeKeys:
    """The scratch keys and channel the probes use: ``{<prefix>:check}:probe:<type>``."""

    prefix: str

    def key(self, kind: str) -> str:
        """The scratch key of ``kind`` (its hash tag puts every one in one slot)."""
        return f"{{{self.prefix}:check}}:probe:{kind}"

    def all(self) -> list[str]:
        """Every scratch key a probe may create."""
        return [self.key(kind) for kind in ("string", "hash", "list", "zset", "stream")]


Arg = str | int
_PROBES: Final[dict[str, Callable[[ProbeKeys], tuple[Arg, ...]]]] = {
    # In the order they run: a key is made before the commands that read it.
    "ping": lambda k: ("PING",),
    "hello": lambda k: ("HELLO",),
    "info": lambda k: ("INFO", "server"),
    "config|get": lambda k: ("CONFIG", "GET", "maxmemory-policy"),
    "client|setinfo": lambda k: ("CLIENT", "SETINFO", "LIB-NAME", "redis-py"),
    "time": lambda k: ("TIME",),
    "cluster|slots": lambda k: ("CLUSTER", "SLOTS"),
    "cluster|shards": lambda k: ("CLUSTER", "SHARDS"),
    "cluster|nodes": lambda k: ("CLUSTER", "NODES"),
    "wait": lambda k: ("WAIT", 0, 1),
    "del": lambda k: ("DEL", *k.all()),
    "exists": lambda k: ("EXISTS", k.key("string")),
    "set": lambda k: ("SET", k.key("string"), "1", "PX", 60_000),
    "get": lambda k: ("GET", k.key("string")),
    "persist": lambda k: ("PERSIST", k.key("string")),
    "pexpireat": lambda k: ("PEXPIREAT", k.key("string"), _soon()),
    "hset": lambda k: ("HSET", k.key("hash"), "f", "1"),
    "hsetnx": lambda k: ("HSETNX", k.key("hash"), "g", "1"),
    "hget": lambda k: ("HGET", k.key("hash"), "f"),
    "hmget": lambda k: ("HMGET", k.key("hash"), "f", "g"),
    "hgetall": lambda k: ("HGETALL", k.key("hash")),
    "hkeys": lambda k: ("HKEYS", k.key("hash")),
    "hlen": lambda k: ("HLEN", k.key("hash")),
    "hincrby": lambda k: ("HINCRBY", k.key("hash"), "n", 1),
    "hdel": lambda k: ("HDEL", k.key("hash"), "f"),
    "rpush": lambda k: ("RPUSH", k.key("list"), "a"),
    "lpush": lambda k: ("LPUSH", k.key("list"), "b"),
    "llen": lambda k: ("LLEN", k.key("list")),
    "lindex": lambda k: ("LINDEX", k.key("list"), 0),
    "lpop": lambda k: ("LPOP", k.key("list")),
    "lrem": lambda k: ("LREM", k.key("list"), 1, "a"),
    "zadd": lambda k: ("ZADD", k.key("zset"), 1, "a"),
    "zscore": lambda k: ("ZSCORE", k.key("zset"), "a"),
    "zcard": lambda k: ("ZCARD", k.key("zset")),
    "zcount": lambda k: ("ZCOUNT", k.key("zset"), "-inf", "+inf"),
    "zrange": lambda k: ("ZRANGE", k.key("zset"), 0, -1),
    "zrangebyscore": lambda k: ("ZRANGEBYSCORE", k.key("zset"), "-inf", "+inf"),
    "zrem": lambda k: ("ZREM", k.key("zset"), "a"),
    "zremrangebyscore": lambda k: ("ZREMRANGEBYSCORE", k.key("zset"), "-inf", "+inf"),
    "xadd": lambda k: ("XADD", k.key("stream"), "*", "f", "v"),
    "xlen": lambda k: ("XLEN", k.key("stream")),
    "xrange": lambda k: ("XRANGE", k.key("stream"), "-", "+", "COUNT", 1),
    "xrevrange": lambda k: ("XREVRANGE", k.key("stream"), "+", "-", "COUNT", 1),
    "xread": lambda k: ("XREAD", "COUNT", 1, "STREAMS", k.key("stream"), "0"),
    "xgroup|create": lambda k: ("XGROUP", "CREATE", k.key("stream"), "g", "0", "MKSTREAM"),
    "xreadgroup": lambda k: (
        "XREADGROUP",
        "GROUP",
        "g",
        "c",
        "COUNT",
        1,
        "STREAMS",
        k.key("stream"),
        ">",
    ),
    "xpending": lambda k: ("XPENDING", k.key("stream"), "g"),
    "xclaim": lambda k: ("XCLAIM", k.key("stream"), "g", "c", 0, _NO_ENTRY),
    "xautoclaim": lambda k: ("XAUTOCLAIM", k.key("stream"), "g", "c", 0, "0-0", "COUNT", 1),
    "xack": lambda k: ("XACK", k.key("stream"), "g", _NO_ENTRY),
    "xinfo|stream": lambda k: ("XINFO", "STREAM", k.key("stream")),
    "xinfo|groups": lambda k: ("XINFO", "GROUPS", k.key("stream")),
    "xinfo|consumers": lambda k: ("XINFO", "CONSUMERS", k.key("stream"), "g"),
    "xgroup|delconsumer": lambda k: ("XGROUP", "DELCONSUMER", k.key("stream"), "g", "c"),
    "xdel": lambda k: ("XDEL", k.key("stream"), _NO_ENTRY),
    "script|load": lambda k: ("SCRIPT", "LOAD", _LUA),
    "evalsha": lambda k: ("EVALSHA", _LUA_SHA, 1, k.key("string")),
    "eval": lambda k: ("EVAL", _LUA, 1, k.key("string")),
    "asking": lambda k: ("ASKING",),
    "spublish": lambda k: ("SPUBLISH", k.key("channel"), ""),
    "ssubscribe": lambda k: ("SSUBSCRIBE", k.key("channel")),
}


def probe_args(command: str, keys: ProbeKeys) -> tuple[Arg, ...]:
    """The arguments that probe ``command`` (an ``ACL_COMMANDS`` or ``NEWER`` name)."""
    return _PROBES[command](keys)


def _in_probe_order(commands: list[str]) -> list[str]:
    wanted = set(commands)
    return [name for name in _PROBES if name in wanted]


@dataclass(frozen=True)
class Denial:
    """The user may not run ``command`` on ``node``: refused for its ``kind``."""

    command: str
    kind: Kind
    node: str


def _kind(message: str) -> Kind:
    # Redis 7.0, 8 and Valkey word it differently; each names what was refused.
    lowered = message.lower()
    if "channel" in lowered:
        return "channel"
    if "key" in lowered and "command" not in lowered:
        return "key"
    return "command"


async def _ask(connection: AbstractConnection, seconds: float, *args: Arg) -> object:
    async with asyncio.timeout(seconds):
        await connection.send_command(*args)
        return await connection.read_response()


async def by_dryrun(
    connection: AbstractConnection,
    user: str,
    node: str,
    commands: list[str],
    keys: ProbeKeys,
    seconds: float,
) -> list[Denial] | None:
    """What ``ACL DRYRUN`` says ``user`` may not run on ``node``; ``None`` when this
    connection may not ask (or the server has no ``ACL DRYRUN``)."""
    try:
        await _ask(connection, seconds, "ACL", "DRYRUN", user, "PING")
    except ResponseError:  # NOPERM, or an unknown subcommand before 7.0
        return None
    denials: list[Denial] = []
    for command in _in_probe_order(commands):
        # A reply other than OK says why the user would be refused.
        reply = await _ask(connection, seconds, "ACL", "DRYRUN", user, *probe_args(command, keys))
        if reply not in (b"OK", "OK"):
            text = reply.decode() if isinstance(reply, bytes) else str(reply)
            denials.append(Denial(command, _kind(text), node))
    return denials


async def by_probe(
    connect: Callable[[], AbstractConnection],
    node: str,
    commands: list[str],
    keys: ProbeKeys,
    seconds: float,
) -> tuple[list[Denial], list[str]]:
    """Run each command's probe on ``node`` as the connected user: the denials, and the
    scratch keys left behind (none unless ``DEL`` is refused)."""
    denials: list[Denial] = []
    connection = connect()
    try:
        await asyncio.wait_for(connection.connect(), seconds)  # type: ignore[no-untyped-call]
        for command in _in_probe_order(commands):
            if command == "ssubscribe":
                continue  # a subscribed connection takes no more commands: its own below
            try:
                await _ask(connection, seconds, *probe_args(command, keys))
            except NoPermissionError as exc:
                denials.append(Denial(command, _kind(str(exc)), node))
            except ResponseError:
                pass  # the ACL let it through; the rest is no concern of this check
        if "ssubscribe" in commands:
            denial = await _subscribe(connect(), node, keys, seconds)
            denials += [denial] if denial is not None else []
        left = await _clean(connection, keys, seconds)
    finally:
        await connection.disconnect()
    return denials, left


async def _subscribe(
    connection: AbstractConnection, node: str, keys: ProbeKeys, seconds: float
) -> Denial | None:
    try:
        await asyncio.wait_for(connection.connect(), seconds)  # type: ignore[no-untyped-call]
        async with asyncio.timeout(seconds):
            await connection.send_command(*probe_args("ssubscribe", keys))
            # On RESP3 (redis-py's default) the confirmation is a push message.
            await connection.read_response(push_request=True)
    except NoPermissionError as exc:
        return Denial("ssubscribe", _kind(str(exc)), node)
    except ResponseError:
        return None
    finally:
        await connection.disconnect()
    return None


async def _clean(connection: AbstractConnection, keys: ProbeKeys, seconds: float) -> list[str]:
    for key in keys.all():
        # An expiry first: should DEL be refused, what is left goes within a minute.
        with contextlib.suppress(ResponseError):
            await _ask(connection, seconds, "PEXPIREAT", key, _soon())
    try:
        await _ask(connection, seconds, "DEL", *keys.all())
    except NoPermissionError as exc:
        if _kind(str(exc)) == "key":
            return []  # no write to these keys was allowed either: none were made
    except ResponseError:
        return []  # MOVED: this node does not serve the scratch keys, so none were made
    else:
        return []
    left = []
    for key in keys.all():
        try:
            if await _ask(connection, seconds, "EXISTS", key):
                left.append(key)
        except ResponseError:
            left.append(key)  # cannot tell: named, since it may be there
    return left
