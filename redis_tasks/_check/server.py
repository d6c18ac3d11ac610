"""What each server's settings mean for tasks: version, eviction, memory, persistence, replicas.

Every function here reads :class:`~.nodes.Facts` (one per primary; one in all on
a standalone server) and returns findings; nothing here talks to Redis. Where
the primaries of a cluster differ, a finding names the ones it is about.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from redis_tasks._redis.replicas import online_count

from .nodes import Facts
from .report import LEVELS, Finding, Level

__all__ = [
    "BYTES_PER_TASK",
    "eviction",
    "failover",
    "memory",
    "persistence",
    "replicas",
    "server",
    "version_of",
]

#: What a queued task costs Redis (docs/operations/redis-layout.md: about 690 bytes with a
#: 100-byte origin and a 64-byte payload), rounded up for the headroom estimate.
BYTES_PER_TASK: Final = 700
#: The oldest server the library runs on (ACL selectors, XAUTOCLAIM's reply, SPUBLISH).
MIN_VERSION: Final = (7, 0)
# Memory use, as a share of maxmemory, from which the headroom is a warning or an error.
_TIGHT, _FULL = 0.80, 0.95


def _lasting(cluster: bool) -> str:
    # CONFIG SET lasts until a restart, and on a cluster a replica promoted in a
    # failover brings its own settings.
    if cluster:
        return " on every node, and in each node's redis.conf so that it lasts"
    return ", and in redis.conf (or your provider's settings) so that it lasts"


def _merge(
    facts: list[Facts], judge: Callable[[Facts], Finding], what: str = "primaries"
) -> list[Finding]:
    """``judge`` of each node, the same findings told once; a finding that only some
    nodes share names them."""
    groups: dict[tuple[str, str, str], tuple[Finding, list[str]]] = {}
    for fact in facts:
        finding = judge(fact)
        groups.setdefault((finding.level, finding.message, finding.fix), (finding, []))[1].append(
            fact.node
        )
    if len(groups) == 1:
        return [finding for finding, _ in groups.values()]
    merged = []
    for finding, nodes in groups.values():
        on = f" (on {', '.join(nodes)})" if len(nodes) < len(facts) else f" (every {what})"
        merged.append(
            Finding(finding.level, finding.topic, finding.message + on, finding.fix, finding.data)
        )
    return sorted(merged, key=lambda f: -LEVELS.index(f.level))


def version_of(info: dict[str, object]) -> tuple[str, str, tuple[int, int] | None]:
    """The server's name, version and the Redis version it is compatible with
    (``(major, minor)``; Valkey reports 7.2.4 there)."""
    redis_version = str(info.get("redis_version", ""))
    try:
        major, minor = (int(part) for part in redis_version.split(".")[:2])
        compatible: tuple[int, int] | None = (major, minor)
    except ValueError:
        compatible = None
    if info.get("server_name") == "valkey" or "valkey_version" in info:
        return "Valkey", str(info.get("valkey_version", redis_version)), compatible
    return "Redis", redis_version, compatible


def server(facts: list[Facts], cluster: bool) -> list[Finding]:
    """The server build and version (7.0 or later), and the role it plays."""

    def judge(fact: Facts) -> Finding:
        name, version, compatible = version_of(fact.info)
        kind = "cluster" if cluster else "standalone"
        label = f"{name} {version}" + (
            f" (Redis {fact.info.get('redis_version')} compatible)" if name == "Valkey" else ""
        )
        data = {"server": name, "version": version, "mode": kind}
        if compatible is None or compatible < MIN_VERSION:
            return Finding(
                "error",
                "server",
                f"{label}: the library needs Redis 7.0 or later (or Valkey)",
                "upgrade the server to Redis 7.0+, Redis 8 or Valkey",
                data,
            )
        if fact.info.get("redis_mode") == "sentinel":
            return Finding(
                "error",
                "server",
                f"{label} is a Sentinel, which stores no data",
                "point --redis-url at the primary the Sentinel names",
                data,
            )
        if not cluster and fact.info.get("role") == "slave":
            return Finding(
                "error",
                "server",
                f"{label}, standalone, is a replica: it refuses writes",
                "point --redis-url at its primary",
                data,
            )
        return Finding("ok", "server", f"{label}, {kind}", data=data)

    return _merge(facts, judge)


def eviction(facts: list[Facts], cluster: bool) -> list[Finding]:
    """``maxmemory-policy``: anything but ``noeviction`` loses tasks."""

    def judge(fact: Facts) -> Finding:
        policy = str(fact.info.get("maxmemory_policy", fact.config.get("maxmemory-policy", "")))
        data = {"maxmemory_policy": policy}
        if policy == "noeviction":
            return Finding(
                "ok",
                "eviction",
                "maxmemory-policy noeviction: a full Redis refuses new tasks (CapacityError) "
                "instead of dropping stored ones",
                data=data,
            )
        return Finding(
            "error",
            "eviction",
            f"maxmemory-policy is {policy or 'unknown'}: under memory pressure Redis evicts "
            "keys, and a task whose keys are evicted vanishes",
            f"CONFIG SET maxmemory-policy noeviction{_lasting(cluster)}",
            data,
        )

    return _merge(facts, judge)


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"  # pragma: no cover - the loop returns


def _headroom_level(share: float) -> Level:
    if share >= _FULL:
        return "error"
    return "warn" if share >= _TIGHT else "ok"


def memory(facts: list[Facts]) -> list[Finding]:
    """``maxmemory`` and the headroom left on the fullest primary (0: unlimited)."""
    limited = [f for f in facts if int(f.info.get("maxmemory", 0) or 0) > 0]
    where = "" if len(facts) == 1 else " on the fullest primary"
    if not limited:
        biggest = max(facts, key=lambda f: int(f.info.get("used_memory", 0)))
        system = int(biggest.info.get("total_system_memory", 0) or 0)
        in_use = int(biggest.info.get("used_memory", 0))
        level: Level = "warn" if system and in_use / system >= _TIGHT else "ok"
        return [
            Finding(
                level,
                "memory",
                f"maxmemory 0 (unlimited): Redis may take all of the host's "
                f"{_size(system) if system else 'memory'}; {_size(in_use)} used{where}",
                "set maxmemory below the host's memory: a full Redis then refuses new "
                "tasks instead of being killed"
                if level == "warn"
                else "",
                {"maxmemory": 0, "used_memory": in_use, "total_system_memory": system},
            )
        ]
    fullest = max(limited, key=lambda f: int(f.info["used_memory"]) / int(f.info["maxmemory"]))
    used, limit = int(fullest.info["used_memory"]), int(fullest.info["maxmemory"])
    share = used / limit
    headroom = max(limit - used, 0)
    level = _headroom_level(share)
    where = "" if len(facts) == 1 else f" on {fullest.node}, the fullest primary"
    return [
        Finding(
            level,
            "memory",
            f"maxmemory {_size(limit)}, {_size(used)} used ({share:.0%}){where}: "
            f"{_size(headroom)} of headroom, about {headroom // BYTES_PER_TASK:,} more queued "
            f"tasks at ~{BYTES_PER_TASK} bytes each",
            ""
            if level == "ok"
            else "raise maxmemory, or give tasks a shorter ttl so fewer "
            "are kept; at the limit creates fail with CapacityError",
            {"maxmemory": limit, "used_memory": used, "headroom": headroom},
        )
    ]


def _snapshots(save: str) -> str:
    pairs = save.split()
    rules = [f"every {s} s if {c}+ writes" for s, c in zip(pairs[::2], pairs[1::2], strict=False)]
    return ", ".join(rules)


def persistence(facts: list[Facts], cluster: bool) -> list[Finding]:
    """AOF, RDB or none, and what each means for an acknowledged task after a restart."""
    enable = f"CONFIG SET appendonly yes appendfsync everysec{_lasting(cluster)}"

    def judge(fact: Facts) -> Finding:
        info, config = fact.info, fact.config
        if (
            info.get("rdb_last_bgsave_status") == "err"
            or info.get("aof_last_write_status") == "err"
        ):
            return Finding(
                "error",
                "persistence",
                "the last RDB save or AOF write failed: Redis refuses writes (MISCONF) "
                "while stop-writes-on-bgsave-error is on",
                "see the Redis log (a full disk, permissions) and fix the cause",
            )
        aof = bool(int(info.get("aof_enabled", 0) or 0))
        fsync = config.get("appendfsync")
        save = config.get("save")
        data = {"aof": aof, "appendfsync": fsync, "save": save}
        if aof and fsync == "always":
            return Finding(
                "ok",
                "persistence",
                "AOF, appendfsync always: an acknowledged "
                "task survives a restart, even a crash of the host",
                data=data,
            )
        if aof and fsync in ("everysec", None):
            said = "appendfsync everysec" if fsync else "appendfsync unknown (CONFIG GET refused)"
            return Finding(
                "ok",
                "persistence",
                f"AOF, {said}: a clean restart keeps every "
                "task; a crash may lose the last second of acknowledged writes "
                "(a task created then is unknown, one finished then runs again)",
                data=data,
            )
        if aof:
            return Finding(
                "warn",
                "persistence",
                "AOF, appendfsync no: the OS writes it "
                "when it likes (about every 30 s), so a crash of the host may lose "
                "that much of acknowledged tasks",
                f"CONFIG SET appendfsync everysec{_lasting(cluster)}",
                data,
            )
        if save is None:
            return Finding(
                "warn",
                "persistence",
                "no AOF; RDB snapshots unknown (CONFIG GET "
                "refused): a restart loses every task since the last snapshot, if "
                "any",
                enable,
                data,
            )
        kept = "; replicas keep what reached them" if cluster else ""
        if save.strip():
            return Finding(
                "warn",
                "persistence",
                f"RDB snapshots only ({_snapshots(save)}): a "
                "restart loses every acknowledged task since the last snapshot"
                f"{kept}",
                enable,
                data,
            )
        return Finding(
            "warn",
            "persistence",
            "none (no AOF, no RDB snapshots): a restart "
            f"loses every task, acknowledged or not{kept}",
            enable,
            data,
        )

    return _merge(facts, judge)


def replicas(facts: list[Facts], cluster: bool) -> list[Finding]:
    """The online replicas of each primary: what the default ``wait_replicas="auto"`` does
    there, and how high a fixed ``wait_replicas`` may go."""
    online = {fact.node: online_count(fact.info) for fact in facts}
    fewest = min(online.values())
    data = {"online_replicas": online, "wait_replicas_max": fewest}
    if fewest:
        each = "every primary has" if cluster else "the server has"
        return [
            Finding(
                "ok",
                "replicas",
                f"{each} {fewest}+ online replica{'s' if fewest > 1 else ''}: wait_replicas up "
                f"to {fewest} is available; the default (auto) waits for one on every write "
                "a client is told of, so a created or ended task survives its primary's loss",
                data=data,
            )
        ]
    if not cluster:
        return [
            Finding(
                "ok",
                "replicas",
                "no replicas: the default wait_replicas (auto) does not wait here (a fixed 1 or "
                "more would fail every write with ReplicationError); losing this server loses "
                "what persistence did not keep",
                data=data,
            )
        ]
    bare = sorted(node for node, count in online.items() if count == 0)
    return [
        Finding(
            "warn",
            "replicas",
            f"no online replica for {', '.join(bare)}: if such a primary fails its slots stay "
            "down; the default wait_replicas (auto) does not wait there, so its latest "
            "acknowledged tasks go with it (a fixed count would fail its writes)",
            "add a replica to each primary (redis-cli --cluster add-node NEW HOST:PORT "
            "--cluster-slave)",
            data,
        )
    ]


def failover(facts: list[Facts], timeout: float) -> list[Finding]:
    """Whether a call's deadline of ``timeout`` seconds outlasts a failover."""
    node_timeouts = [
        int(f.config["cluster-node-timeout"])
        for f in facts
        if f.config.get("cluster-node-timeout", "").isdigit()
    ]
    if not node_timeouts:
        return []  # CONFIG GET refused: the ACL finding tells
    needed = 2 * max(node_timeouts) / 1000 + 2
    data = {"cluster_node_timeout_ms": max(node_timeouts), "timeout_needed": needed}
    said = (
        f"cluster-node-timeout {max(node_timeouts)} ms: a call rides through a failover "
        f"with a timeout of {needed:g} s or more (2 x node timeout + 2 s)"
    )
    if timeout >= needed:
        return [Finding("ok", "failover", f"{said}; --timeout {timeout:g} s does", data=data)]
    return [
        Finding(
            "warn",
            "failover",
            f"{said}; --timeout {timeout:g} s does not",
            f"give the library timeout={needed:g} (RedisTaskManager.from_url, "
            f"redis-tasks worker --timeout {needed:g})",
            data,
        )
    ]
