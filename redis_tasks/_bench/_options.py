"""The ``bench`` sub-command's command line: its scenarios and every option."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

from redis_tasks._bench._args import (
    counts,
    durations,
    fairness_parts,
    non_negative,
    positive,
    replica_count,
)
from redis_tasks._bench._mcp_settings import add_mcp_options
from redis_tasks._bench._scenarios import Settings
from redis_tasks._bench._systems import PEERS

__all__ = ["SCENARIOS", "add_bench_command"]

#: Every scenario, in the order a run takes them.
SCENARIOS: Final = (
    "limit", "drain", "pickup", "lifecycle", "find", "notify", "memory", "mcp", "fairness",
    "parking",
)  # fmt: skip


def add_bench_command(commands: Any) -> None:
    """Register the ``bench`` sub-command and its options."""
    bench = commands.add_parser(
        "bench",
        help="load-test redis-tasks (and peer queues) against a Redis",
        description="Load-test redis-tasks against a Redis, optionally side by side with "
        "peer queues (from a source checkout with `make bench-peers`). Prints a table; "
        "--json and --plot write the results.",
    )
    bench.add_argument(
        "scenarios",
        nargs="*",
        metavar="SCENARIO",
        help=f"any of {', '.join(SCENARIOS)} (default: all)",
    )
    bench.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL"),
        help="Redis or Redis Cluster to load (default: $REDIS_URL, else a private "
        "redis-server on a free loopback port)",
    )
    bench.add_argument(
        "--topology",
        choices=("standalone", "cluster", "both"),
        default=None,
        help="load private servers on loopback instead of --redis-url: a redis-server, a "
        "3-primary, 3-replica cluster, or both, every scenario's rounds alternating between "
        "them and the cluster's figures compared with standalone's",
    )
    bench.add_argument(
        "--start-cluster",
        action="store_true",
        help="the same as --topology cluster",
    )
    bench.add_argument(
        "--replicas",
        type=replica_count,
        default=None,
        help="replicas per primary of the private servers (default: none for standalone, "
        "one per primary for the cluster); with --topology both, give the same to both",
    )
    bench.add_argument(
        "--instructions",
        action="store_true",
        help="run the private servers and our workers under valgrind's callgrind and report "
        "the instructions per drained job they ran: work, whatever the machine's speed (user "
        "space only; everything runs many times slower, so size --tasks down)",
    )
    care = bench.add_argument_group(
        "on a Redis you run (every key the run writes is named *rtbench-<run>-*, and goes "
        "when it ends, Ctrl-C included)"
    )
    care.add_argument(
        "--clean",
        action="store_true",
        help="run nothing: remove the keys that earlier runs killed outright left on "
        "--redis-url (runs still going are left alone), and say how many",
    )
    care.add_argument(
        "--allow-large",
        action="store_true",
        help="load the server even when the run would take more than half of the free "
        "memory under its maxmemory (refused by default, with the numbers)",
    )
    defaults = Settings()
    sizes = bench.add_argument_group("sizes")
    sizes.add_argument("--tasks", type=positive, default=defaults.tasks, help="drain: jobs")
    sizes.add_argument("--concurrency", type=positive, default=defaults.concurrency)
    sizes.add_argument(
        "--workers",
        type=counts,
        default=defaults.workers,
        help="worker process counts for drain and lifecycle, e.g. 1,2,4",
    )
    sizes.add_argument("--rounds", type=positive, default=defaults.rounds)
    sizes.add_argument("--pickups", type=positive, default=defaults.pickups)
    sizes.add_argument("--lifecycle-tasks", type=positive, default=defaults.lifecycle_tasks)
    sizes.add_argument(
        "--clients", type=positive, default=defaults.clients, help="lifecycle: clients in all"
    )
    sizes.add_argument(
        "--lifecycle-processes",
        type=positive,
        default=defaults.lifecycle_processes,
        help="lifecycle: client processes the clients are spread over",
    )
    sizes.add_argument(
        "--memory-tasks",
        type=positive,
        default=defaults.memory_tasks,
        help="memory: tasks (jobs) per measurement",
    )
    sizes.add_argument("--pollers", type=positive, default=defaults.pollers)
    sizes.add_argument("--find-ops", type=positive, default=defaults.find_ops)
    sizes.add_argument("--notifies", type=positive, default=defaults.notifies)
    sizes.add_argument("--limit-requests", type=positive, default=defaults.limit_requests)
    add_mcp_options(bench)
    _add_fairness_options(bench, defaults)
    peers = bench.add_argument_group("peers (drain and pickup, side by side)")
    peers.add_argument(
        "--peers",
        default="",
        help=f"comma-separated, or 'all': {', '.join(PEERS)}",
    )
    peers.add_argument(
        "--peers-python",
        type=Path,
        default=Path("benchmarks/.venv-peers/bin/python"),
        help="the peers' virtualenv interpreter (default: %(default)s)",
    )
    peers.add_argument("--peers-dir", type=Path, default=Path("benchmarks/peers"))
    peers.add_argument(
        "--uvloop",
        action="store_true",
        help="also run redis-tasks on uvloop (pip install 'redis-mcp-tasks[fast]'), beside the "
        "default asyncio loop",
    )
    peers.add_argument(
        "--metrics",
        action="store_true",
        help="also run redis-tasks recording its metrics (OpenTelemetry SDK and a Prometheus "
        "reader; pip install 'redis-mcp-tasks[otel]'), beside the default",
    )
    peers.add_argument(
        "--traces",
        action="store_true",
        help="also run redis-tasks making its spans through the OpenTelemetry SDK (batched, "
        "exported nowhere; pip install 'redis-mcp-tasks[otel]'), beside the default",
    )
    out = bench.add_argument_group("output")
    out.add_argument("--json", type=Path, default=None, help="write the results here ('-': stdout)")
    out.add_argument("--plot", type=Path, default=None, help="write a PNG plot here")
    out.add_argument("--quiet", action="store_true", help="no progress bar")


def _add_fairness_options(bench: Any, defaults: Settings) -> None:
    """The ``fairness`` scenario's sizes (redis-tasks only: no peer has tenants)."""
    fair = bench.add_argument_group(
        "fairness scenario (tenants sharing one redis-tasks worker process; runs with fair "
        "dispatch and again first come, first served)"
    )
    fair.add_argument(
        "--fair-tasks",
        type=positive,
        default=defaults.fair_tasks,
        help="N: tasks tenant A floods at once (default: %(default)s)",
    )
    fair.add_argument(
        "--fair-concurrency",
        type=positive,
        default=defaults.fair_concurrency,
        help="C: the worker's concurrency (default: %(default)s)",
    )
    fair.add_argument(
        "--fair-handler-ms",
        type=positive,
        default=defaults.fair_handler_ms,
        help="D: how long each task's handler sleeps, in ms (default: %(default)s)",
    )
    fair.add_argument(
        "--fair-newcomer-slots",
        type=non_negative,
        default=defaults.fair_newcomer_slots,
        help="the worker's --newcomer-slots: slots beyond C that only a newcomer's task "
        "takes when every other is busy (default: %(default)s)",
    )
    fair.add_argument(
        "--fair-parts",
        type=fairness_parts,
        default=defaults.fair_parts,
        help="the measurements a round takes, of fair,fifo,tenants,weights (default: all); "
        "each target is judged only on what was measured",
    )
    fair.add_argument(
        "--fair-durations",
        type=durations,
        default=defaults.fair_durations,
        help="how each tool's duration is drawn, of mean D: fixed (all D: tools that start "
        "together end together, and a slot frees only at their end), uniform (in D/2 to "
        "3D/2) or exponential (default: %(default)s)",
    )
    fair.add_argument(
        "--fair-late",
        type=positive,
        default=defaults.fair_late,
        help="K: tasks tenant B creates during the flood, from --fair-late-after-ms after it "
        "began, one every --fair-late-every-ms; reported: B's create-to-start p50/p99/max "
        "beside N x D / C (default: %(default)s)",
    )
    fair.add_argument(
        "--fair-late-after-ms",
        type=non_negative,
        default=defaults.fair_late_after_ms,
        help="when tenant B's first create comes, in ms after the flood began "
        "(default: %(default)s)",
    )
    fair.add_argument(
        "--fair-late-every-ms",
        type=positive,
        default=defaults.fair_late_every_ms,
        help="ms between tenant B's creates (default: %(default)s)",
    )
    fair.add_argument(
        "--fair-tenants",
        type=positive,
        default=defaults.fair_tenants,
        help="tenants that each create --fair-tenant-tasks, tenant after tenant, before the "
        "worker starts; reported: Jain's fairness index of the starts per tenant over the "
        "first tenth of them (default: %(default)s)",
    )
    fair.add_argument(
        "--fair-tenant-tasks",
        type=positive,
        default=defaults.fair_tenant_tasks,
        help="tasks of each of those tenants (default: %(default)s)",
    )
    fair.add_argument(
        "--fair-interleaved",
        action="store_true",
        help="create those tenants' tasks interleaved (task i of every tenant, then task i + 1) "
        "instead of tenant after tenant",
    )
    park = bench.add_argument_group(
        "parking (tasks waiting for people beside another tenant's; redis-tasks only)"
    )
    park.add_argument(
        "--park-tasks",
        type=positive,
        default=defaults.park_tasks,
        help="N: tasks of tenant A that each ask a question nobody answers, and are parked "
        "(default: %(default)s)",
    )
    park.add_argument(
        "--park-concurrency",
        type=positive,
        default=defaults.park_concurrency,
        help="C: the worker's concurrency (default: %(default)s)",
    )
    park.add_argument(
        "--park-late",
        type=positive,
        default=defaults.park_late,
        help="K: plain tasks tenant B creates, one every 10 ms, on the idle worker and again "
        "beside the parked ones; reported: their create-to-start p50/p99/max "
        "(default: %(default)s)",
    )
    park.add_argument(
        "--park-answered",
        type=positive,
        default=defaults.park_answered,
        help="M: parked tasks answered at once; reported: answer-to-resume p50/p99/max, and "
        "whether each resumed and completed once (default: %(default)s)",
    )
    park.add_argument(
        "--park-idle-s",
        type=float,
        default=defaults.park_idle_s,
        help="S: seconds over which Redis's commands are counted, on the idle worker and "
        "with the N parked (default: %(default)s)",
    )
    fair.add_argument(
        "--fair-weighted-tasks",
        type=positive,
        default=defaults.fair_weighted_tasks,
        help="tasks of each of two tenants of weight 3 and 1, interleaved, before the worker "
        "starts; reported: each one's share of the first half of the starts "
        "(default: %(default)s)",
    )
