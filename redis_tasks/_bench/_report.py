"""Turning a run's results into a table, the targets' verdicts, and a PNG plot."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Final

from ._fair_figures import fairness_lines, fairness_targets
from ._mcp_figures import mcp_lines
from ._park_figures import parking_lines, parking_targets

__all__ = ["compare", "plot", "ratios", "table"]

OURS: Final = "redis-tasks"
#: Issue 14's bounds: lifecycle over drain (same workers), and bytes per task for a
#: 100-byte origin with a 64-byte payload, queued and retained after completion.
_LIFECYCLE_SHARE: Final = 0.8
_MEMORY_CASE: Final = (100, 64)
_MEMORY_BOUND: Final = 700


def _best_peer(systems: dict[str, Any], key: str, *, highest: bool) -> tuple[str, float] | None:
    """The peer with the highest (or lowest) ``key`` figure, and that figure."""
    # Our own variants (redis-tasks+uvloop) are shown beside us, never as a peer.
    figures = [
        (name, _figure(result, key))
        for name, result in systems.items()
        if not name.startswith(OURS)
    ]
    known = [(name, value) for name, value in figures if value is not None]
    if not known:
        return None
    return (max if highest else min)(known, key=lambda item: item[1])


def _figure(result: dict[str, Any], key: str) -> float | None:
    if key == "drain":
        drain = result.get("drain", {}).get("1")
        return None if drain is None else float(drain["rate"])
    pickup = result.get("pickup")
    return None if pickup is None else float(pickup[key])


def ratios(results: dict[str, Any]) -> dict[str, Any]:
    """Our figures over each peer's, and the issue's targets with pass/fail."""
    systems: dict[str, Any] = results.get("systems", {})
    ours = systems.get(OURS, {})
    out: dict[str, Any] = {"per_peer": {}, "targets": {}}
    for name, result in systems.items():
        if name == OURS:
            continue
        row: dict[str, float] = {}
        our_drain, their_drain = _figure(ours, "drain"), _figure(result, "drain")
        if our_drain and their_drain:
            row["drain"] = round(our_drain / their_drain, 2)
        for key in ("p50", "p99"):
            our_lat, their_lat = _figure(ours, key), _figure(result, key)
            if our_lat and their_lat:
                # Above 1 means we are faster (their latency over ours).
                row[f"pickup_{key}"] = round(their_lat / our_lat, 2)
        out["per_peer"][name] = row
    best_drain = _best_peer(systems, "drain", highest=True)
    our_drain = _figure(ours, "drain")
    if best_drain and our_drain:
        out["targets"]["drain_4x_best_peer"] = {
            "best_peer": best_drain[0],
            "ratio": round(our_drain / best_drain[1], 2),
            "met": our_drain >= 4 * best_drain[1],
        }
    for key in ("p50", "p99"):
        best, ours_lat = _best_peer(systems, key, highest=False), _figure(ours, key)
        if best and ours_lat:
            out["targets"][f"pickup_{key}_at_most_best_peer"] = {
                "best_peer": best[0],
                "ours_ms": ours_lat,
                "peer_ms": best[1],
                "met": ours_lat <= best[1],
            }
    drains = ours.get("drain", {})
    for workers, row in results.get("lifecycle", {}).items():
        if workers in drains:
            share = row["rate"] / drains[workers]["rate"]
            out["targets"][f"lifecycle_w{workers}_0.8x_drain"] = {
                "fraction": round(share, 2),
                "met": share >= _LIFECYCLE_SHARE,
            }
    for case in results.get("memory", {}).get("retained", []):
        if (case["origin_bytes"], case["payload_bytes"]) == _MEMORY_CASE:
            queued, retained = case["queued"]["total"], case["retained"]["total"]
            out["targets"]["memory_at_most_700_bytes"] = {
                "queued_bytes": queued,
                "retained_bytes": retained,
                "met": max(queued, retained) <= _MEMORY_BOUND,
            }
    find, limit = results.get("find"), results.get("limit", {}).get("find")
    if find and limit:
        share = find["rate"] / limit["rate"]
        out["targets"]["find_25pct_of_redis_benchmark"] = {
            "fraction": round(share, 3),
            "met": share >= 0.25,
        }
    out["targets"].update(fairness_targets(results.get("fairness")))
    out["targets"].update(parking_targets(results.get("parking")))
    return out


#: The cluster's targets against standalone: throughput at least, pickup p99 and CPU
#: per drained job (workers and primaries) at most.
_PARITY: Final = {"throughput": 0.9, "pickup_p99": 1.2, "cpu": 1.15}


def compare(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The cluster's figures over standalone's (same run), with the parity targets.

    Throughput ratios above 1 mean the cluster is faster; latency and CPU ratios
    below 1 mean it is quicker or cheaper. Targets: every throughput >= 0.9x,
    pickup p99 <= 1.2x, CPU per drained job <= 1.15x.

    The CPU ratio is the median of the rounds' own ratios, each cluster round over
    the standalone round run just before it: on a shared machine whose speed
    drifts by half within minutes, a pair sees the same drift, which a ratio of
    two medians does not cancel. Under callgrind (``--instructions``), the
    instructions per drained job of the workers and primaries are paired the same
    way (``instructions_w<N>``; no target of its own: the kernel's part is not in it).
    """
    base, other = runs["standalone"], runs["cluster"]
    ours_base = base.get("systems", {}).get(OURS, {})
    ours_other = other.get("systems", {}).get(OURS, {})
    found: dict[str, float] = {}
    for workers, row in ours_base.get("drain", {}).items():
        theirs = ours_other.get("drain", {}).get(workers)
        if theirs:
            found[f"drain_w{workers}"] = theirs["rate"] / row["rate"]
            # Round i of each ran in the same pass; a topology that failed has fewer.
            cpu = (theirs.get("cpu_rounds", ()), row.get("cpu_rounds", ()))
            pairs = list(zip(*cpu, strict=False))
            if pairs and all(mine > 0 for _, mine in pairs):
                found[f"cpu_w{workers}"] = statistics.median(t / m for t, m in pairs)
            counted = (theirs.get("instructions_rounds", ()), row.get("instructions_rounds", ()))
            pairs = list(zip(*counted, strict=False))
            if pairs and all(mine > 0 for _, mine in pairs):
                found[f"instructions_w{workers}"] = statistics.median(t / m for t, m in pairs)
    for workers, row in base.get("lifecycle", {}).items():
        theirs = other.get("lifecycle", {}).get(workers)
        if theirs:
            found[f"lifecycle_w{workers}"] = theirs["rate"] / row["rate"]
    if base.get("find") and other.get("find"):
        found["find"] = other["find"]["rate"] / base["find"]["rate"]
    pickup_base, pickup_other = ours_base.get("pickup"), ours_other.get("pickup")
    if pickup_base and pickup_other:
        found["pickup_p50"] = pickup_other["p50"] / pickup_base["p50"]
        found["pickup_p99"] = pickup_other["p99"] / pickup_base["p99"]
    targets = {}
    for name, ratio in found.items():
        if name.startswith(("drain", "lifecycle", "find")):
            targets[name] = {"ratio": round(ratio, 2), "met": ratio >= _PARITY["throughput"]}
        elif name == "pickup_p99":
            targets[name] = {"ratio": round(ratio, 2), "met": ratio <= _PARITY["pickup_p99"]}
        elif name.startswith("cpu"):
            targets[name] = {"ratio": round(ratio, 2), "met": ratio <= _PARITY["cpu"]}
    return {
        "cluster_over_standalone": {name: round(value, 2) for name, value in found.items()},
        "targets": targets,
    }


def _bound(target: str) -> str:
    """A cluster target's bound as the table states it."""
    if target == "pickup_p99":
        return f"<= {_PARITY['pickup_p99']}x"
    if target.startswith("cpu"):
        return f"<= {_PARITY['cpu']}x"
    return f">= {_PARITY['throughput']}x"


def table(results: dict[str, Any]) -> str:
    """The run as aligned text: per topology one row per system, then our own
    scenarios; with two topologies, the cluster's figures over standalone's."""
    if "topologies" in results:
        lines: list[str] = []
        for name, run in results["topologies"].items():
            lines += [f"== {name} ==", _table({**run, "settings": results["settings"]}), ""]
        comparison = results["comparison"]
        parts = [f"{k} {v}x" for k, v in comparison["cluster_over_standalone"].items()]
        lines.append(f"cluster / standalone: {', '.join(parts) if parts else '-'}")
        for name, target in comparison["targets"].items():
            bound = _bound(name)
            verdict = "met" if target["met"] else "NOT met"
            lines.append(f"target cluster {name} {bound}: {verdict} ({target['ratio']}x)")
        return "\n".join(lines)
    return _table(results)


def _table(results: dict[str, Any]) -> str:
    lines: list[str] = []
    env = results["environment"]
    settings = results["settings"]
    lines.append(
        f"Redis {env['redis_version']} ({env['redis_mode']}, "
        f"{env.get('primaries', 1)} primar{'y' if env.get('primaries', 1) == 1 else 'ies'}, "
        f"{env.get('replicas_per_primary', 0)} replica(s) each), {env['cpus']} CPUs, "
        f"Python {env['python']}; no-op jobs, worker concurrency {settings['concurrency']}"
    )
    systems: dict[str, Any] = results.get("systems", {})
    counts = sorted({int(w) for r in systems.values() for w in r.get("drain", {})})
    if any("drain" in r or "pickup" in r for r in systems.values()):
        # As wide as the longest name (an earlier revision's metered variant is long).
        w_name = max([20, *(len(name) + 2 for name in systems)])
        head = f"{'system':{w_name}}" + "".join(f"{f'drain/s w={w}':>15}" for w in counts)
        head += f"{'pickup p50/p99 ms':>20}{'cmds/job':>10}{'CPU us/job wrk+redis':>22}"
        lines += ["", head]
        for name, result in systems.items():
            drain = result.get("drain", {})
            cells = "".join(
                f"{drain[str(w)]['rate'] if str(w) in drain else '-':>15}" for w in counts
            )
            pickup = result.get("pickup")
            lat = f"{pickup['p50']:.2f} / {pickup['p99']:.2f}" if pickup else "-"
            first = drain.get(str(counts[0])) if counts else None
            per_job = first["commands_per_job"] if first else "-"
            cpu = (
                f"{first['worker_us_per_job']} + {first['redis_us_per_job']}"
                if first and "worker_us_per_job" in first
                else "-"
            )
            lines.append(f"{name:{w_name}}{cells}{lat:>20}{per_job:>10}{cpu:>22}")
            sized = [(w, drain[str(w)]["claim_sizes"]) for w in counts
                     if "claim_sizes" in drain.get(str(w), {})]  # fmt: skip
            if sized:
                lines.append(
                    f"{'':{w_name}}jobs per claim call: "
                    + "; ".join(
                        f"w={w} {s['jobs_per_call']} ({s['calls']:,} calls)" for w, s in sized
                    )
                )
            if first and "redis_us_per_job_by_primary" in first:
                shares = " / ".join(str(us) for us in first["redis_us_per_job_by_primary"])
                lines.append(f"{'':{w_name}}Redis CPU us/job by primary: {shares}")
            if first and "redis_instructions_per_job" in first:
                counted = (
                    first.get("worker_instructions_per_job", 0),
                    first["redis_instructions_per_job"],
                )
                enqueue = first.get("redis_enqueue_instructions_per_job", 0)
                lines.append(
                    f"{'':{w_name}}instructions/job (callgrind) wrk+redis: "
                    f"{counted[0]:,} + {counted[1]:,}; redis for the enqueue: {enqueue:,}"
                )
        lines.append(
            f"(drain: {settings['tasks']} jobs, median of {settings['rounds']} rounds; "
            f"pickup: {settings['pickups']} jobs one at a time)"
        )
    if "lifecycle" in results:
        for workers, row in results["lifecycle"].items():
            lines.append(
                f"lifecycle w={workers}: {row['rate']} tasks/s with {row['clients']} clients"
                + (f" in {row['client_processes']} processes" if "client_processes" in row else "")
                + "; "
                f"create-to-terminal p50 {row['p50']} / p99 {row['p99']} / "
                f"p99.9 {row['p99.9']} ms"
                + (
                    f"; CPU us/task client {row['client_us_per_task']} + workers "
                    f"{row['worker_us_per_task']} + Redis {row['redis_us_per_task']}"
                    if "client_us_per_task" in row
                    else ""
                )
            )
    memory = results.get("memory", {})
    for row in memory.get("retained", []):
        queued, retained = row["queued"], row["retained"]
        lines.append(
            f"memory, origin {row['origin_bytes']} B + payload {row['payload_bytes']} B: "
            f"queued {queued['total']} B/task ({queued['streams']} in streams), retained "
            f"after completion {retained['total']} B/task ({retained['keys']} in its keys)"
        )
    queued_jobs = {
        name: result["memory"]["bytes_per_job"]
        for name, result in systems.items()
        if "memory" in result
    }
    if queued_jobs:
        parts = [f"{name} {value}" for name, value in queued_jobs.items()]
        lines.append(f"memory per queued no-op job, bytes: {', '.join(parts)}")
    if "find" in results:
        row = results["find"]
        lines.append(
            f"find: {row['rate']} ops/s from {row['pollers']} pollers; "
            f"p50 {row['p50']} / p99 {row['p99']} ms"
        )
    if "notify" in results:
        row = results["notify"]
        lines.append(f"notify: change to subscriber p50 {row['p50']} / p99 {row['p99']} ms")
    if "limit" in results:
        row = results["limit"]
        where = " on one primary" if env["redis_mode"] == "cluster" else ""
        lines.append(
            f"limit (redis-benchmark{where}, {row['clients']} clients, EVALSHA): "
            f"create {row['create']['rate']}/s, find {row['find']['rate']}/s"
        )
    if "mcp" in results:
        lines += mcp_lines(results["mcp"])
    for row in results.get("mcp_peers", {}).values():
        lines += mcp_lines(row)
    if "fairness" in results:
        lines += fairness_lines(results["fairness"])
    if "parking" in results:
        lines += parking_lines(results["parking"])
    verdicts = results.get("ratios", {})
    for name, row in verdicts.get("per_peer", {}).items():
        parts = [f"{key} {value}x" for key, value in row.items()]
        lines.append(f"ours vs {name}: {', '.join(parts) if parts else '-'}")
    for name, target in verdicts.get("targets", {}).items():
        details = ", ".join(f"{k} {v}" for k, v in target.items() if k != "met")
        lines.append(f"target {name}: {'met' if target['met'] else 'NOT met'} ({details})")
    return "\n".join(lines)


def _systems_by_label(results: dict[str, Any]) -> dict[str, Any]:
    """Every system's results; with two topologies, each labelled with its topology."""
    if "topologies" not in results:
        systems: dict[str, Any] = results.get("systems", {})
        return systems
    return {
        f"{name} ({topology})": result
        for topology, run in results["topologies"].items()
        for name, result in run.get("systems", {}).items()
    }


def plot(results: dict[str, Any], path: Path) -> None:
    """Write a PNG: drain throughput by worker count, and pickup latency percentiles.

    Needs matplotlib (``pip install 'redis-mcp-tasks[bench]'``).
    """
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    systems = _systems_by_label(results)
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for name, result in systems.items():
        drain = result.get("drain", {})
        if not drain:
            continue
        workers = sorted(int(w) for w in drain)
        rates = [drain[str(w)]["rate"] for w in workers]
        width = 2.5 if name.startswith(OURS) else 1.2
        left.plot(workers, rates, marker="o", linewidth=width, label=name)
    counts = sorted({int(w) for r in systems.values() for w in r.get("drain", {})})
    left.set_xticks(counts)
    left.set_xlabel("worker processes")
    left.set_ylabel("jobs/s (drain, median)")
    left.set_title(f"Drain throughput, concurrency {results['settings']['concurrency']}")
    left.set_ylim(bottom=0)
    left.grid(alpha=0.3)
    left.legend()
    names = [n for n, r in systems.items() if r.get("pickup")]
    positions = range(len(names))
    width = 0.38
    p50 = [systems[n]["pickup"]["p50"] for n in names]
    p99 = [systems[n]["pickup"]["p99"] for n in names]
    for offset, values, label in ((-width / 2, p50, "p50"), (width / 2, p99, "p99")):
        bars = right.bar([i + offset for i in positions], values, width, label=label)
        right.bar_label(bars, fmt="%.2f", fontsize=7)
    right.set_xticks(list(positions), names, rotation=20)
    right.set_ylabel("ms")
    right.set_title("Idle pickup latency (enqueue to handler start)")
    right.grid(alpha=0.3, axis="y")
    right.legend()
    if "topologies" in results:
        envs = [run["environment"] for run in results["topologies"].values()]
        modes = " vs ".join(env["redis_mode"] for env in envs)
    else:
        envs = [results["environment"]]
        modes = envs[0]["redis_mode"]
    figure.suptitle(
        f"redis-tasks bench: Redis {envs[0]['redis_version']} {modes}, "
        f"{envs[0]['cpus']} CPUs, {results['date']}"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
