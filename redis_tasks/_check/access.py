"""The ACL findings: which refusals stop the library, which only cost it something.

A refused key pattern or a command every task needs is an error. Some refusals
leave the library working: the shard channels on a cluster (events are then read
with one blocking XREAD per partition), ``inspect``'s and the dashboard's
commands, ``CONFIG GET`` (the manager skips its eviction check) and ``CLIENT
SETINFO`` (redis-py names its connections with it, and ignores a refusal that
Redis still logs): those are warnings.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from .acl import INSPECT_ONLY, NEWER, SHARD_CHANNELS, Denial
from .report import Finding, Level

__all__ = ["acl_findings"]

# Why a refusal of these commands is only a warning, by command.
_COSTS: Final[dict[str, str]] = {
    **dict.fromkeys(SHARD_CHANNELS, "task events are read with one blocking XREAD per partition"),
    **dict.fromkeys(INSPECT_ONLY, "inspect, the dashboard and a worker's backlog gauges fail"),
    "config|get": "a manager cannot check the eviction policy when it starts",
    **dict.fromkeys(NEWER, "redis-py's CLIENT SETINFO on each connection lands in ACL LOG"),
}


def _on(nodes: set[str], every: list[str]) -> str:
    if len(every) == 1 or nodes == set(every):
        return " on every node" if len(every) > 1 else ""
    return f" on {', '.join(sorted(nodes))}"


def _grant(user: str, rights: Iterable[str], cluster: bool) -> str:
    where = " on every node (ACLs are per node)" if cluster else ""
    return f"ACL SETUSER {user} {' '.join(rights)}{where}"


def acl_findings(
    denials: list[Denial],
    *,
    user: str,
    prefix: str,
    checked: dict[str, str],
    left: dict[str, list[str]],
    cluster: bool,
) -> list[Finding]:
    """What ``denials`` mean for ``user`` (``checked``: how each node was asked,
    ``"ACL DRYRUN"`` or ``"probe"``; ``left``: scratch keys a node kept)."""
    every = sorted(checked)
    pattern = f"{{{prefix}:*"
    findings: list[Finding] = []
    keys = [d for d in denials if d.kind == "key"]
    if keys:
        names = sorted({d.command for d in keys})
        findings.append(
            Finding(
                "error",
                "acl",
                f"user {user} may not use keys under {pattern}{_on({d.node for d in keys}, every)}"
                f" ({', '.join(names)} refused on them)",
                _grant(user, [f"~{pattern}"], cluster),
                {"keys_refused": names},
            )
        )
    channels = [d for d in denials if d.kind == "channel"]
    if channels:
        findings.append(
            Finding(
                "warn",
                "acl",
                f"user {user} may not use the shard channels &{pattern}"
                f"{_on({d.node for d in channels}, every)}: {_COSTS['spublish']}",
                _grant(user, [f"&{pattern}"], cluster),
            )
        )
    commands = [d for d in denials if d.kind == "command"]
    required = [d for d in commands if d.command not in _COSTS]
    if required:
        names = sorted({d.command for d in required})
        findings.append(
            Finding(
                "error",
                "acl",
                f"user {user} may not run {', '.join(names)}"
                f"{_on({d.node for d in required}, every)}: the library needs "
                f"{'it' if len(names) == 1 else 'them'}",
                _grant(user, [f"+{name}" for name in names], cluster),
                {"commands_refused": names},
            )
        )
    costs: dict[str, list[Denial]] = {}
    for denial in commands:
        if denial.command in _COSTS:
            costs.setdefault(_COSTS[denial.command], []).append(denial)
    for cost, found in costs.items():
        names = sorted({d.command for d in found})
        findings.append(
            Finding(
                "warn",
                "acl",
                f"user {user} may not run {', '.join(names)}"
                f"{_on({d.node for d in found}, every)}: {cost}",
                _grant(user, [f"+{name}" for name in names], cluster),
                {"commands_refused": names},
            )
        )
    if not findings:
        how = sorted(set(checked.values()))
        said = " and ".join(
            "ACL DRYRUN"
            if h == "ACL DRYRUN"
            else f"running each on scratch keys {{{prefix}:check}}:probe:*, since deleted, "
            "as ACL DRYRUN is refused"
            for h in how
        )
        level: Level = "ok"
        findings.append(
            Finding(
                level,
                "acl",
                f"user {user} may run every command the library needs on {pattern}"
                f"{_on(set(every), every)} (checked by {said})",
                data={"checked": checked},
            )
        )
    kept = sorted({key for keys_left in left.values() for key in keys_left})
    if kept:
        findings.append(
            Finding(
                "warn",
                "acl",
                f"scratch keys left behind ({', '.join(kept)}): DEL was refused; they expire "
                "within a minute",
                _grant(user, ["+del"], cluster),
            )
        )
    return findings
