"""``check``: ask a Redis everything the findings need, and put the report together.

The order is the operator's: what the server is (and, on a cluster, whether all
slots are served), what it keeps (eviction, memory, persistence, replicas),
what the user may do (the ACL, the Lua scripts), and how far away it is
(PING round trips). Every call has the timeout; a server that cannot be reached
or refuses the login is :class:`Unreachable`, every other failure a finding.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from typing import Final

from redis.asyncio.connection import AbstractConnection, parse_url
from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from redis_tasks._redis.client import ConnectionSettings
from redis_tasks._redis.keys import KeySpace
from redis_tasks._redis.scripts import scripts

from . import server as judge
from .access import acl_findings
from .acl import Denial, ProbeKeys, by_dryrun, by_probe, needed
from .connection import connect_to, get_anywhere, on_connection
from .fastmcp import snapshot_key
from .nodes import Facts, cluster_findings, cluster_nodes, facts_of, parse_nodes
from .partitions import partition_finding
from .report import Finding, Level, Report, redact, scrub

__all__ = ["PINGS", "Progress", "Unreachable", "check"]

#: PING round trips timed per primary.
PINGS: Final = 300
#: Told how many pings of how many are done (for a progress line).
Progress = Callable[[int, int], None]
# Round trips from which the latency is a warning (milliseconds, p50 and p99).
_SLOW_P50, _SLOW_P99 = 5.0, 50.0
_UNREACHABLE: Final = (RedisConnectionError, RedisTimeoutError, TimeoutError, OSError)


class Unreachable(Exception):
    """The server could not be reached, or refused the login (the message is safe to print)."""


async def check(
    url: str,
    *,
    prefix: str,
    call_timeout: float,
    partitions: int = 16,
    pings: int = PINGS,
    progress: Progress | None = None,
) -> Report:
    """Check the Redis at ``url`` for the library with key prefix ``prefix`` (and, on a
    cluster, how its ``partitions`` fall on the primaries).

    Raises :class:`Unreachable` when its first node cannot be asked anything, and
    :class:`ValueError` for a URL that is not one.
    """
    settings = ConnectionSettings.from_url(url, timeout=call_timeout, max_connections=2, options={})
    host, port = settings.seeds[0]
    seed = f"{host}:{port}"
    report = Report(redact(url), prefix)
    try:
        first: Facts | None = await facts_of(settings, seed)
    except AuthenticationError as exc:
        raise Unreachable(f"{seed} refused the login: {scrub(str(exc), url)}") from None
    except NoPermissionError:
        first = None  # INFO refused: told below, and by the ACL finding
    except ResponseError as exc:  # something that speaks RESP, but not like Redis
        raise Unreachable(f"{seed} did not answer INFO: {scrub(str(exc), url)}") from None
    except _UNREACHABLE as exc:
        raise Unreachable(
            f"cannot reach {seed}: {scrub(str(exc), url) or type(exc).__name__}"
        ) from None
    cluster = await _is_cluster(settings, seed, first)
    findings = report.findings
    primaries, others = [seed], []
    if cluster:
        try:
            nodes = parse_nodes(await cluster_nodes(settings, seed), host)
        except (ResponseError, *_UNREACHABLE) as exc:
            findings.append(_failed("cluster", "CLUSTER NODES", exc, url))
            nodes = []
        findings += cluster_findings(nodes) if nodes else []
        findings += [partition_finding(nodes, prefix, partitions)] if nodes else []
        working = [n for n in nodes if n.failing != "fail" and "noaddr" not in n.flags]
        primaries = [n.name for n in working if n.primary and n.slots] or [seed]
        others = [n.name for n in working if n.name not in primaries]
        silent = await _silent(settings, [*primaries, *others])
        if silent:
            findings.append(_silence(silent, primaries))
            primaries = [n for n in primaries if n not in silent] or [seed]
            others = [n for n in others if n not in silent]
    facts = await _facts(settings, primaries, first, url, findings) if first else []
    if facts:
        findings[:0] = judge.server(facts, cluster)
        findings += judge.eviction(facts, cluster)
        findings += judge.memory(facts)
        findings += judge.persistence(facts, cluster)
        findings += judge.replicas(facts, cluster)
        findings += judge.failover(facts, call_timeout) if cluster else []
    elif first is None:
        findings.insert(
            0,
            Finding(
                "error",
                "server",
                "INFO refused: version, mode and settings unknown",
                _grant_hint(url, "+info"),
            ),
        )
    version = judge.version_of(facts[0].info)[2] if facts else None
    findings += await _access(settings, url, prefix, [*primaries, *others], cluster, version)
    findings += await _scripts(settings, primaries, url)
    refused = {c for f in findings if f.topic == "acl" for c in f.data.get("commands_refused", ())}
    if "get" not in refused:  # a refused GET would land in the operator's ACL log
        key_id = await get_anywhere(settings, primaries, KeySpace(prefix).snapshot_key_id)
        findings += snapshot_key(key_id if isinstance(key_id, bytes) else None)
    findings += await _latency(settings, primaries, pings, progress, url)
    return report


def _user(url: str) -> str:
    username = parse_url(url).get("username")
    return str(username) if username else "default"


def _grant_hint(url: str, right: str) -> str:
    return f"ACL SETUSER {_user(url)} {right}"


def _failed(topic: str, what: str, exc: BaseException, url: str) -> Finding:
    """A finding for a question that failed; a refusal is told by the ACL finding too."""
    said = scrub(str(exc), url) or type(exc).__name__
    verb = "refused" if isinstance(exc, NoPermissionError) else "failed"
    fix = "see the acl finding" if verb == "refused" else "see the server's log"
    return Finding("error", topic, f"{what} {verb}: {said}", fix)


async def _is_cluster(settings: ConnectionSettings, seed: str, first: Facts | None) -> bool:
    if first is not None:
        return bool(first.info.get("cluster_enabled"))
    try:
        await cluster_nodes(settings, seed)
    except (ResponseError, *_UNREACHABLE):
        return False
    return True


async def _silent(settings: ConnectionSettings, nodes: list[str]) -> list[str]:
    """The ``nodes`` that do not answer a PING (the cluster may not have noticed yet)."""

    async def answers(connection: AbstractConnection) -> None:
        async with asyncio.timeout(settings.timeout):
            await connection.send_command("PING")
            await connection.read_response()

    outcomes = await asyncio.gather(
        *(on_connection(connect_to(settings, n)(), settings.timeout, answers) for n in nodes),
        return_exceptions=True,
    )
    return [
        node
        for node, outcome in zip(nodes, outcomes, strict=True)
        if isinstance(outcome, _UNREACHABLE)
    ]


def _silence(silent: list[str], primaries: list[str]) -> Finding:
    serving = [n for n in silent if n in primaries]
    return Finding(
        "error" if serving else "warn",
        "nodes",
        f"{', '.join(silent)} {'does' if len(silent) == 1 else 'do'} not answer"
        + (
            ": the slots of a primary that does not answer are down until its replica takes over"
            if serving
            else ""
        ),
        "check that the node runs and that this host reaches its address",
        {"silent": silent},
    )


async def _facts(
    settings: ConnectionSettings,
    nodes: list[str],
    first: Facts | None,
    url: str,
    findings: list[Finding],
) -> list[Facts]:
    async def ask(node: str) -> Facts:
        if first is not None and node == first.node:
            return first
        return await facts_of(settings, node)

    answers = await asyncio.gather(*(ask(node) for node in nodes), return_exceptions=True)
    facts = []
    for node, answer in zip(nodes, answers, strict=True):
        if isinstance(answer, Facts):
            facts.append(answer)
        elif isinstance(answer, Exception):
            findings.append(_failed("server", f"INFO on {node}", answer, url))
        else:
            raise answer
    return facts


async def _access(
    settings: ConnectionSettings,
    url: str,
    prefix: str,
    nodes: list[str],
    cluster: bool,
    version: tuple[int, int] | None,
) -> list[Finding]:
    user, keys = _user(url), ProbeKeys(prefix)
    commands = needed(cluster=cluster, version=version)
    checked: dict[str, str] = {}
    left: dict[str, list[str]] = {}
    denials: list[Denial] = []
    problems: list[Finding] = []
    for node in nodes:
        connect = connect_to(settings, node)
        try:
            found = await on_connection(
                connect(),
                settings.timeout,
                partial(
                    by_dryrun,
                    user=user,
                    node=node,
                    commands=commands,
                    keys=keys,
                    seconds=settings.timeout,
                ),
            )
            if found is None:
                found, left[node] = await by_probe(connect, node, commands, keys, settings.timeout)
                checked[node] = "probe"
            else:
                checked[node] = "ACL DRYRUN"
            denials += found
        except (*_UNREACHABLE, ResponseError) as exc:
            problems.append(_failed("acl", f"the ACL check on {node}", exc, url))
    if not checked:
        return problems
    return problems + acl_findings(
        denials, user=user, prefix=prefix, checked=checked, left=left, cluster=cluster
    )


async def _scripts(settings: ConnectionSettings, primaries: list[str], url: str) -> list[Finding]:
    """``SCRIPT LOAD`` of every library script on every primary."""
    failures: list[str] = []
    refused = False

    async def load(node: str, connection: AbstractConnection) -> None:
        nonlocal refused
        for script in scripts.values():
            try:
                async with asyncio.timeout(settings.timeout):
                    await connection.send_command("SCRIPT", "LOAD", script.source)
                    sha = await connection.read_response()
            except NoPermissionError:
                refused = True
                return
            except ResponseError as exc:
                failures.append(f"{script.name} on {node}: {str(exc).splitlines()[0]}")
                continue
            if (sha.decode() if isinstance(sha, bytes) else str(sha)) != script.sha:
                failures.append(f"{script.name} on {node}: the server's SHA differs")

    for node in primaries:
        try:
            await on_connection(connect_to(settings, node)(), settings.timeout, partial(load, node))
        except _UNREACHABLE as exc:
            failures.append(f"{node}: {scrub(str(exc), url) or type(exc).__name__}")
    where = "every primary" if len(primaries) > 1 else "the server"
    if refused:
        return [
            Finding(
                "error",
                "scripts",
                f"SCRIPT LOAD refused for user {_user(url)}: the "
                "library cannot run its Lua scripts",
                _grant_hint(url, "+script|load"),
            )
        ]
    if failures:
        return [
            Finding(
                "error",
                "scripts",
                f"{len(failures)} Lua script loads failed: " + "; ".join(failures[:3]),
                "see the server's log; the scripts need Lua 5.1 scripting (EVAL) enabled",
                {"failed": failures},
            )
        ]
    return [
        Finding(
            "ok",
            "scripts",
            f"all {len(scripts)} Lua scripts load on {where}",
            data={"scripts": len(scripts)},
        )
    ]


async def _latency(
    settings: ConnectionSettings,
    primaries: list[str],
    pings: int,
    progress: Progress | None,
    url: str,
) -> list[Finding]:
    """PING round trips, ``pings`` per primary (one connection each, one at a time)."""
    if pings <= 0:
        return []
    done = 0
    timings: dict[str, list[float]] = {}

    async def ping(node: str, connection: AbstractConnection) -> None:
        nonlocal done
        samples = timings.setdefault(node, [])
        for _ in range(pings):
            started = time.perf_counter()
            async with asyncio.timeout(settings.timeout):
                await connection.send_command("PING")
                await connection.read_response()
            samples.append((time.perf_counter() - started) * 1000)
            done += 1
            if progress is not None:
                progress(done, pings * len(primaries))

    try:
        await asyncio.gather(
            *(
                on_connection(connect_to(settings, n)(), settings.timeout, partial(ping, n))
                for n in primaries
            )
        )
    except (*_UNREACHABLE, ResponseError) as exc:
        return [_failed("latency", "PING", exc, url)]
    p50 = max(_quantile(samples, 0.50) for samples in timings.values())
    p99, slowest = max((_quantile(s, 0.99), n) for n, s in timings.items())
    level: Level = "warn" if p50 >= _SLOW_P50 or p99 >= _SLOW_P99 else "ok"
    each = f" to each of {len(primaries)} primaries" if len(primaries) > 1 else ""
    slow = f" (slowest: {slowest})" if len(primaries) > 1 else ""
    return [
        Finding(
            level,
            "latency",
            f"PING round trip p50 {p50:.2f} ms, p99 {p99:.2f} ms over {pings} pings{each}{slow}",
            ""
            if level == "ok"
            else "run the application close to Redis: every task costs several round trips",
            {"p50_ms": round(p50, 3), "p99_ms": round(p99, 3), "pings": pings},
        )
    ]


def _quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]
