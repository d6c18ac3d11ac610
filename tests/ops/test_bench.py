"""``redis-tasks bench``: every scenario runs for real (tiny sizes) and reports what it measured."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

from redis_tasks._bench._callgrind import Callgrind
from redis_tasks._bench._cli import SCENARIOS
from redis_tasks._bench._fairness import draw_durations
from redis_tasks._bench._namespace import ANY_RUN
from redis_tasks._bench._probe import RedisAddress
from redis_tasks._bench._progress import Progress, percentile
from redis_tasks._bench._report import compare, plot, ratios, table
from redis_tasks._bench._scenarios import Bench, Settings
from redis_tasks._bench._systems import AdapterError, AdapterProcess, System, ours, peer
from redis_tasks._redis.contract import CREATE_BATCH
from redis_tasks.testing import RedisCluster, RedisServer, start_redis_server
from tests.support.backends import SERVERS, server_url

pytestmark = pytest.mark.slow

TINY = Settings(
    tasks=300,
    concurrency=8,
    workers=(1, 2),
    rounds=1,
    pickups=5,
    lifecycle_tasks=60,
    clients=4,
    pollers=4,
    find_ops=200,
    notifies=5,
    limit_requests=500,
    memory_tasks=400,
)


def bench_keys(url: str) -> set[bytes]:
    """Every benchmark key on the server (on every node of a cluster)."""
    client = redis.Redis.from_url(url)
    try:
        info = client.info("cluster")
        if not info.get("cluster_enabled"):
            return set(client.scan_iter(match=ANY_RUN, count=1000))
        nodes = client.execute_command("CLUSTER", "NODES")  # type: ignore[no-untyped-call]
    finally:
        client.close()
    keys: set[bytes] = set()
    for line in (nodes.decode() if isinstance(nodes, bytes) else nodes).splitlines():
        fields = line.split()
        if fields and "master" in fields[2]:
            host, _, port = fields[1].split("@")[0].rpartition(":")
            node = redis.Redis(host=host, port=int(port))
            try:
                keys |= set(node.scan_iter(match=ANY_RUN, count=1000))
            finally:
                node.close()
    return keys


@pytest.fixture
def log() -> io.BytesIO:
    return io.BytesIO()


@pytest.mark.parametrize("server", SERVERS)
async def test_drain_and_pickup_measure_our_workers_and_leave_no_keys(
    request: pytest.FixtureRequest, server: str, tmp_path: Path
) -> None:
    url = server_url(request, server)
    before = bench_keys(url)
    with (tmp_path / "log").open("wb") as log:
        bench = Bench(url, TINY, Progress(quiet=True), log)
        rate, calls, usage = await bench.drain(ours(), 2, "drain")
        pickup = await bench.pickup(ours())
    assert rate > 0
    assert usage["worker_us_per_job"] > 0
    assert usage["redis_us_per_job"] > 0
    assert usage["worker_cores"] > 0
    # The workers' claim calls, by the jobs each brought: every job came with one.
    sizes = usage["claim_sizes"]
    assert sum(int(size) * calls for size, calls in sizes["by_size"].items()) == TINY.tasks
    assert sizes["calls"] == sum(sizes["by_size"].values())
    # Every job: a create, a claim and a finish, each alone or in a batch (at most
    # CREATE_BATCH creates a call); and its record written by all three.
    assert calls["evalsha"] >= TINY.tasks / CREATE_BATCH
    assert calls["hset"] >= 3 * TINY.tasks
    assert pickup["samples"] == TINY.pickups
    assert 0 < pickup["p50"] <= pickup["p99"]
    if server == "cluster":  # Redis CPU is kept per primary too
        assert len(usage["redis_us_per_job_by_primary"]) == 3
        assert sum(usage["redis_us_per_job_by_primary"]) > 0
    assert bench_keys(url) == before


@pytest.mark.parametrize("server", SERVERS)
async def test_our_own_scenarios_measure_and_leave_no_keys(
    request: pytest.FixtureRequest, server: str, tmp_path: Path
) -> None:
    url = server_url(request, server)
    before = bench_keys(url)
    with (tmp_path / "log").open("wb") as log:
        bench = Bench(url, TINY, Progress(quiet=True), log)
        lifecycle = await bench.lifecycle(1)
        find = await bench.find()
        notify = await bench.notify()
        limit = await bench.limit()
        queued = await bench.memory_queued(ours())
        memory = await bench.memory_retained(100, 64)
    assert queued["bytes_per_job"] > 0
    assert memory["queued"]["total"] > 0
    # Stream nodes are allocated 4 KiB at a time: a few hundred entries may fit
    # in the nodes the warm-up made.
    assert memory["queued"]["streams"] >= 0
    assert memory["retained"]["total"] > 0
    assert lifecycle["client_processes"] == 2
    assert lifecycle["rate"] > 0
    assert lifecycle["p50"] <= lifecycle["p99"] <= lifecycle["p99.9"]
    assert lifecycle["client_us_per_task"] > 0
    assert lifecycle["worker_us_per_task"] > 0
    assert lifecycle["redis_us_per_task"] > 0
    assert find["rate"] > 0
    assert find["pollers"] == TINY.pollers
    assert notify["samples"] == TINY.notifies
    assert notify["p50"] > 0
    assert limit["create"]["rate"] > 0
    assert limit["find"]["rate"] > 0
    assert bench_keys(url) == before


async def test_a_worker_that_dies_is_reported_not_waited_for(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    broken = System("broken", (sys.executable, "-c", "import sys; sys.exit(3)"))
    with (tmp_path / "log").open("wb") as log:
        process = await AdapterProcess.start(broken, ("worker",), log, "broken worker")
        with pytest.raises(AdapterError, match="exited"):
            await process.ask("report", "seen ", within=30)


MCP_TINY = ["--mcp-servers", "2", "--mcp-workers", "1", "--mcp-clients", "4", "--mcp-tasks", "40",
            "--mcp-pollers", "4", "--mcp-polls", "100", "--mcp-client-processes", "2"]  # fmt: skip
TINY_ARGS = ["--tasks", "200", "--rounds", "1", "--pickups", "3", "--workers", "1",
             "--lifecycle-tasks", "40", "--clients", "4", "--pollers", "4", "--find-ops", "100",
             "--notifies", "3", "--limit-requests", "300", "--memory-tasks", "200", *MCP_TINY,
             "--fair-tasks", "60", "--fair-concurrency", "4", "--fair-handler-ms", "5",
             "--fair-late", "2", "--fair-tenants", "5", "--fair-tenant-tasks", "4",
             "--fair-weighted-tasks", "8", "--park-tasks", "40", "--park-late", "4",
             "--park-answered", "10", "--park-idle-s", "0.5", "--json", "-", "--quiet"]  # fmt: skip


def test_every_scenario_runs_against_a_cluster_node_s_url(redis_cluster: RedisCluster) -> None:
    url = redis_cluster.replicas[0].url  # any node leads to the cluster, a replica too
    done = subprocess.run(
        [sys.executable, "-m", "redis_tasks", "bench", *SCENARIOS, "--redis-url", url, *TINY_ARGS],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert results["environment"]["redis_mode"] == "cluster"
    assert results["environment"]["primaries"] == 3
    ours = results["systems"]["redis-tasks"]
    assert ours["drain"]["1"]["rate"] > 0
    assert len(ours["drain"]["1"]["redis_us_per_job_by_primary"]) == 3
    assert ours["pickup"]["samples"] == 3
    for scenario in ("lifecycle", "find", "notify", "limit", "memory", "fairness", "parking"):
        assert results[scenario], scenario
    assert ours["memory"]["bytes_per_job"] > 0
    assert results["mcp"]["completed"] == 40
    assert results["mcp"]["errors"] == results["mcp"]["lost"] == 0
    assert str(redis_cluster.replicas[0].port) not in done.stdout


def test_both_topologies_in_one_run_are_compared() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "redis_tasks", "bench", "drain", "pickup", "lifecycle", "find",
         "--topology", "both", "--replicas", "1", *TINY_ARGS],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert set(results["topologies"]) == {"standalone", "cluster"}
    assert results["topologies"]["cluster"]["environment"]["primaries"] == 3
    for run in results["topologies"].values():  # one replica per primary on both
        assert run["environment"]["replicas_per_primary"] == 1
    ratios_ = results["comparison"]["cluster_over_standalone"]
    assert set(ratios_) == {
        "drain_w1",
        "cpu_w1",
        "lifecycle_w1",
        "find",
        "pickup_p50",
        "pickup_p99",
    }
    assert all(value > 0 for value in ratios_.values())
    assert set(results["comparison"]["targets"]) == {
        "drain_w1",
        "cpu_w1",
        "lifecycle_w1",
        "find",
        "pickup_p99",
    }


def test_instructions_count_the_drain_in_our_workers_and_the_primaries() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "redis_tasks", "bench", "drain", "--topology", "standalone",
         "--instructions", "--tasks", "200", "--rounds", "1", "--workers", "1",
         "--concurrency", "8", "--json", "-", "--quiet"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert results["settings"]["callgrind"] is True
    drain = results["systems"]["redis-tasks"]["drain"]["1"]
    worker, redis_ = drain["worker_instructions_per_job"], drain["redis_instructions_per_job"]
    # Each job is scripts in Redis and Python in the worker: some hundred thousand
    # instructions each (a dozen at most: more would be the run's setup counted too).
    assert 50_000 < redis_ < 12_000_000
    assert 50_000 < worker < 12_000_000
    assert 10_000 < drain["redis_enqueue_instructions_per_job"] < 12_000_000
    assert drain["instructions_rounds"] == [worker + redis_]
    assert f"instructions/job (callgrind) wrk+redis: {worker:,} + {redis_:,};" in table(results)


async def test_a_create_s_instructions_are_counted_on_a_fresh_server() -> None:
    from benchmarks.create_instructions import measure

    # One script call per create: some hundred thousand instructions (208,005 when
    # measured); a count never started falls outside.
    assert 50_000 < await measure(100) < 2_000_000


async def test_callgrind_counts_what_a_server_ran_between_start_and_take(tmp_path: Path) -> None:
    counter = Callgrind(tmp_path / "callgrind")
    server = start_redis_server(tmp_path / "redis", binary=counter.wrapper(), startup_timeout=60)
    client = redis.asyncio.Redis.from_url(server.url)
    try:
        (pid,) = [int((await client.info("server"))["process_id"])]

        async def counted(pings: int) -> int:
            await counter.start([pid])
            for _ in range(pings):
                await client.ping()
            (count,) = await counter.take([pid])
            return count

        idle, once, twice = await counted(0), await counted(300), await counted(600)
    finally:
        await client.aclose()
        server.stop()
    # Each stretch is its own: twice the pings, about twice the count; none, next to nothing.
    assert 1.7 < twice / once < 2.3
    assert idle < once / 10


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "nonsense"], "unknown scenario"),
        (["bench", "--peers", "celery"], "unknown peer"),
        (["bench", "--peers", "saq", "--peers-python", "/nonexistent/python"], "no "),
        (["bench", "--instructions", "--redis-url", "redis://127.0.0.1:1/0"], "give --topology"),
    ],
)
def test_bad_arguments_exit_2_with_a_reason(argv: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "redis_tasks", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert message in done.stderr


def test_counts_must_be_positive() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "redis_tasks", "bench", "--workers", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "counts must be >= 1" in done.stderr


def test_peers_need_their_adapter_and_interpreter(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no adapter"):
        peer("saq", Path(sys.executable), tmp_path)
    (tmp_path / "peer_saq.py").write_text("")
    with pytest.raises(FileNotFoundError, match="interpreter"):
        peer("saq", tmp_path / "python", tmp_path)
    assert peer("saq", Path(sys.executable), tmp_path).name == "saq"
    with pytest.raises(ValueError, match="unknown peer"):
        peer("celery", Path(sys.executable), tmp_path)


def test_redis_addresses_for_redis_benchmark() -> None:
    plain = RedisAddress.parse("redis://127.0.0.1:7001/0")
    assert (plain.host, plain.port, plain.password, plain.tls) == ("127.0.0.1", 7001, None, False)
    secured = RedisAddress.parse("rediss://svc:p%40ss@cache.internal:6380")
    assert (secured.username, secured.password, secured.tls) == ("svc", "p@ss", True)
    assert "p@ss" not in repr(secured)
    with pytest.raises(ValueError, match="redis://"):
        RedisAddress.parse("unix:///tmp/redis.sock")


def test_percentiles_take_the_nearest_rank() -> None:
    samples = [float(i) for i in range(1, 101)]
    assert percentile(samples, 0.5) == 51.0
    assert percentile(samples, 0.99) == 99.0
    assert percentile([3.0], 0.999) == 3.0
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 0.5)


def results(ours_drain: int, ours_p99: float, find: int) -> dict[str, Any]:
    return {
        "date": "2026-11-30",
        "environment": {
            "redis_version": "7.0.15",
            "redis_mode": "standalone",
            "cpus": 2,
            "python": "3.11.7",
            "machine": "x86_64",
        },
        "settings": {"concurrency": 32, "tasks": 1000, "rounds": 3, "pickups": 100},
        "systems": {
            "redis-tasks": {
                "drain": {
                    "1": {"rate": ours_drain, "commands_per_job": 20.1},
                    "2": {"rate": ours_drain + 500, "commands_per_job": 20.3},
                },
                "pickup": {"p50": 1.0, "p99": ours_p99},
            },
            "fastq": {
                "drain": {"1": {"rate": 1000, "commands_per_job": 2.0}},
                "pickup": {"p50": 1.5, "p99": 3.0},
            },
            "slowq": {
                "drain": {"1": {"rate": 400, "commands_per_job": 30.0}},
                "pickup": {"p50": 8.0, "p99": 12.0},
            },
        },
        "find": {"rate": find, "p50": 1.0, "p99": 2.0, "pollers": 64},
        "limit": {
            "create": {"rate": 20_000, "p50": 1.0, "p99": 2.0},
            "find": {"rate": 40_000, "p50": 1.0, "p99": 2.0},
            "clients": 64,
        },
    }


def test_ratios_judge_each_target_against_the_best_peer() -> None:
    met = ratios(results(ours_drain=3000, ours_p99=1.4, find=10_000))
    assert met["per_peer"]["fastq"] == {"drain": 3.0, "pickup_p50": 1.5, "pickup_p99": 2.14}
    assert met["targets"]["drain_4x_best_peer"] == {
        "best_peer": "fastq",
        "ratio": 3.0,
        "met": False,
    }
    assert met["targets"]["pickup_p50_at_most_best_peer"] == {
        "best_peer": "fastq",
        "ours_ms": 1.0,
        "peer_ms": 1.5,
        "met": True,
    }
    assert met["targets"]["pickup_p99_at_most_best_peer"]["met"] is True
    assert met["targets"]["find_25pct_of_redis_benchmark"] == {"fraction": 0.25, "met": True}
    assert met["targets"]["drain_4x_best_peer"]["met"] is False
    assert ratios(results(ours_drain=4000, ours_p99=3.0, find=0))["targets"]["drain_4x_best_peer"][
        "met"
    ]
    missed = ratios(results(ours_drain=2999, ours_p99=3.01, find=9_999))["targets"]
    assert missed["pickup_p50_at_most_best_peer"]["met"] is True  # ours stays 1.0 ms
    del missed["pickup_p50_at_most_best_peer"]
    assert not any(target["met"] for target in missed.values())


def test_lifecycle_and_memory_are_judged_by_their_bounds() -> None:
    run = results(ours_drain=3000, ours_p99=1.4, find=10_000)
    run["lifecycle"] = {
        "1": {"rate": 2400, "p50": 5, "p99": 9, "p99.9": 12, "clients": 32},
        "2": {"rate": 2799, "p50": 5, "p99": 9, "p99.9": 12, "clients": 32},
    }

    def memory(queued: int, retained: int) -> dict[str, Any]:
        split = {"streams": 0, "keys": 0}
        return {
            "origin_bytes": 100,
            "payload_bytes": 64,
            "tasks": 10,
            "queued": {"total": queued, **split},
            "retained": {"total": retained, **split},
        }

    run["memory"] = {"retained": [memory(700, 650)]}
    targets = ratios(run)["targets"]
    assert targets["lifecycle_w1_0.8x_drain"] == {"fraction": 0.8, "met": True}
    assert targets["lifecycle_w2_0.8x_drain"] == {"fraction": 0.8, "met": False}
    assert targets["memory_at_most_700_bytes"]["met"] is True
    run["memory"] = {"retained": [memory(701, 650)]}
    assert ratios(run)["targets"]["memory_at_most_700_bytes"]["met"] is False
    assert "memory, origin 100 B + payload 64 B: queued 701 B/task" in table(run)


def test_the_cluster_is_judged_against_standalone_of_the_same_run(tmp_path: Path) -> None:
    base = results(ours_drain=3000, ours_p99=1.4, find=10_000)
    base["lifecycle"] = {"1": {"rate": 1000, "p50": 5, "p99": 9, "p99.9": 12, "clients": 32}}
    other = results(ours_drain=2700, ours_p99=1.7, find=8_000)
    other["lifecycle"] = {"1": {"rate": 950, "p50": 6, "p99": 10, "p99.9": 13, "clients": 32}}
    other["environment"] = {**other["environment"], "redis_mode": "cluster", "primaries": 3}
    # CPU per job: each cluster round over the standalone round run just before it.
    # The pairs' ratios are 1.1, 1.15 and 1.07: their median is 1.1, where the ratio
    # of the two medians (160 / 150) would hide the drift the pairs cancel.
    base["systems"]["redis-tasks"]["drain"]["1"]["cpu_rounds"] = [100, 200, 150]
    other["systems"]["redis-tasks"]["drain"]["1"]["cpu_rounds"] = [110, 230, 160]
    # Under callgrind the instructions pair the same way; a figure with no target.
    base["systems"]["redis-tasks"]["drain"]["1"]["instructions_rounds"] = [1000, 1000, 900]
    other["systems"]["redis-tasks"]["drain"]["1"]["instructions_rounds"] = [1030, 1050, 990]
    base["systems"]["redis-tasks"]["drain"]["2"]["cpu_rounds"] = [100, 100, 100]
    other["systems"]["redis-tasks"]["drain"]["2"]["cpu_rounds"] = [120, 110, 116]
    verdict = compare({"standalone": base, "cluster": other})
    assert verdict["cluster_over_standalone"] == {
        "drain_w1": 0.9,
        "cpu_w1": 1.1,
        "instructions_w1": 1.05,
        "drain_w2": 0.91,
        "cpu_w2": 1.16,
        "lifecycle_w1": 0.95,
        "find": 0.8,
        "pickup_p50": 1.0,
        "pickup_p99": 1.21,
    }
    met = {name: target["met"] for name, target in verdict["targets"].items()}
    assert met == {
        "drain_w1": True,
        "cpu_w1": True,
        "drain_w2": True,
        "cpu_w2": False,
        "lifecycle_w1": True,
        "find": False,
        "pickup_p99": False,
    }
    run = {"date": "2026-12-01", "settings": base["settings"]}
    both = {**run, "topologies": {"standalone": base, "cluster": other}, "comparison": verdict}
    text = table(both)
    assert "== standalone ==" in text
    assert "== cluster ==" in text
    assert "target cluster find >= 0.9x: NOT met (0.8x)" in text
    assert "target cluster cpu_w2 <= 1.15x: NOT met (1.16x)" in text
    path = tmp_path / "both.png"
    plot(both, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_table_and_the_plot(tmp_path: Path) -> None:
    run = results(ours_drain=3000, ours_p99=1.4, find=10_000)
    run["ratios"] = ratios(run)
    text = table(run)
    assert "redis-tasks" in text
    assert "fastq" in text
    assert "slowq" in text
    assert "target drain_4x_best_peer: NOT met" in text
    path = tmp_path / "bench.png"
    plot(run, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_scenarios_are_the_documented_ones() -> None:
    assert SCENARIOS == (
        "limit", "drain", "pickup", "lifecycle", "find", "notify", "memory", "mcp", "fairness",
        "parking",
    )  # fmt: skip


#: Small enough for a few seconds, yet A's flood (N x D / C = 1 s) still runs when B's
#: tasks come (from 0.2 s after it began).
FAIR_TINY = ["--fair-tasks", "200", "--fair-concurrency", "4", "--fair-handler-ms", "20",
             "--fair-late", "3", "--fair-tenants", "10", "--fair-tenant-tasks", "10",
             "--fair-weighted-tasks", "20"]  # fmt: skip


def test_tool_durations_are_drawn_alike_in_every_run_of_a_round() -> None:
    assert draw_durations("fixed", 500, 3, "1") == [500, 500, 500]
    uniform = draw_durations("uniform", 500, 2_000, "1")
    assert uniform == draw_durations("uniform", 500, 2_000, "1")  # the same tools again
    assert uniform != draw_durations("uniform", 500, 2_000, "2")
    assert min(uniform) >= 250
    assert max(uniform) <= 750
    assert statistics.mean(uniform) == pytest.approx(500, rel=0.03)
    exponential = draw_durations("exponential", 500, 2_000, "1")
    assert min(exponential) >= 1
    assert max(exponential) > 1_500
    assert statistics.mean(exponential) == pytest.approx(500, rel=0.1)


def test_fairness_puts_the_late_tenant_ahead_of_the_flood(redis_server: RedisServer) -> None:
    url = redis_server.url
    before = bench_keys(url)
    done = subprocess.run(
        [sys.executable, "-m", "redis_tasks", "bench", "fairness", "--redis-url", url,
         *FAIR_TINY, "--rounds", "1", "--json", "-", "--quiet"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    fairness = results["fairness"]
    fair, fifo = fairness["noisy"]["fair"], fairness["noisy"]["fifo"]
    for row in (fair, fifo):
        assert row["b_samples"] == 3
        assert 0 < row["b_p50"] <= row["b_p99"] <= row["b_max"]
        assert row["fifo_expectation_ms"] == 200 * 20 // 4
        assert row["a_drain_ms"] > 0
    # By order, not by time: with fair dispatch B's tasks start before A's backlog
    # drains, and fewer of A's tasks start while one of B's waits than when every
    # task waits its turn (about 4 of them against a hundred or more).
    assert fair["b_before_a_last"]
    assert fair["a_ahead_max"] < fifo["a_ahead_max"]
    assert fair["b_p99"] < fifo["b_p99"]
    tenants = fairness["tenants"]
    assert tenants["window"] == 10
    assert 0 < tenants["jain"] <= 1
    weights = fairness["weights"]
    assert weights["window"] == 20
    assert sum(weights["shares"].values()) == pytest.approx(1)
    assert 0 < fair["longest_gap_ms"] <= fair["b_max"] + 1000
    targets = results["ratios"]["targets"]
    assert targets["fairness_b_p99_at_most_4d_over_c_plus_50ms"]["bound_ms"] == 70
    next_free = targets["fairness_b_p99_at_most_the_next_free_slot_plus_50ms"]
    assert next_free["bound_ms"] == pytest.approx(fair["longest_gap_ms"] + 50, abs=0.1)
    assert "fairness_jain_at_least_0.95" in targets
    assert "fairness_weights_75_25_within_5_points" in targets
    assert "fair dispatch:" in table(results)
    assert bench_keys(url) == before
    assert url not in done.stdout
    assert "user:" not in done.stdout  # no partition key, no tenant


def test_fairness_takes_only_the_parts_asked_with_newcomer_slots(
    redis_server: RedisServer,
) -> None:
    """``--fair-parts fair`` measures the noisy neighbour with fair dispatch alone, on a
    worker with ``--fair-newcomer-slots``; only its targets are judged."""
    done = subprocess.run(
        [sys.executable, "-m", "redis_tasks", "bench", "fairness", "--redis-url",
         redis_server.url, *FAIR_TINY, "--fair-parts", "fair", "--fair-newcomer-slots", "1",
         "--rounds", "1", "--json", "-", "--quiet"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    fairness = results["fairness"]
    assert list(fairness["noisy"]) == ["fair"]
    assert fairness["newcomer_slots"] == 1
    assert "tenants" not in fairness
    assert "weights" not in fairness
    targets = results["ratios"]["targets"]
    assert "fairness_b_p99_at_most_4d_over_c_plus_50ms" in targets
    assert "fairness_jain_at_least_0.95" not in targets
    assert "(+1 newcomer slots)" in table(results)
    refused = subprocess.run(
        [sys.executable, "-m", "redis_tasks", "bench", "fairness", "--fair-parts", "fair,nope"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "give some of fair,fifo,tenants,weights" in refused.stderr


def test_parked_tasks_leave_the_worker_to_another_tenant(tmp_path: Path) -> None:
    """``bench parking``, small: every asked task parked, none inside the worker, each
    answered one resumed and completed once, and the worker stopped at once. On a server
    of its own: the memory a parked task costs is a difference of ``used_memory``, which
    other tests' keys expiring on a shared server once turned negative."""
    server = start_redis_server(tmp_path / "redis")
    try:
        _parking_runs(server.url)
    finally:
        server.stop()


def _parking_runs(url: str) -> None:
    before = bench_keys(url)
    done = subprocess.run(
        [sys.executable, "-m", "redis_tasks", "bench", "parking", "--redis-url", url,
         "--park-tasks", "60", "--park-concurrency", "4", "--park-late", "5",
         "--park-answered", "20", "--park-idle-s", "0.5", "--rounds", "1", "--json", "-",
         "--quiet"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    parking = results["parking"]
    assert parking["handlers_inside"] == 0
    assert (parking["answered"], parking["resumed"], parking["completed"]) == (20, 20, 20)
    assert parking["resumed_twice"] == parking["completed_twice"] == 0
    assert parking["stop_codes"] == [0]
    assert parking["memory_per_parked"] > 0
    figures = ("idle_b", "beside_b", "resume", "answer_call", "resume_after_accepted",
               "new_at_once", "new_at_once_from_call")  # fmt: skip
    for figure in figures:
        row = parking[figure]
        assert 0 <= row["p50"] <= row["p99"] <= row["max"], figure
    targets = results["ratios"]["targets"]
    assert targets["parking_every_answered_task_resumes_and_completes_once"]["met"]
    assert targets["parking_sigterm_under_2s"]["stop_s"] == parking["stop_s"]
    assert "answer-to-resume" in table(results)
    assert "new plain tasks created at once" in table(results)
    assert bench_keys(url) == before
    assert url not in done.stdout
    assert "user:" not in done.stdout  # no partition key, no tenant


def test_the_side_channel_script_s_ks_test() -> None:
    from benchmarks.timing_side_channel import ks_two_sample

    same = [float(i % 97) for i in range(2000)]
    assert ks_two_sample(same, list(reversed(same))) == (0.0, 1.0)
    d, p = ks_two_sample([float(i) for i in range(500)], [float(i) + 1000 for i in range(500)])
    assert d == 1.0
    assert p < 1e-100
    # A shift of a tenth of the spread over 2,000 samples each is detected (D ~ 0.1)...
    d, p = ks_two_sample([i / 2000 for i in range(2000)], [i / 2000 + 0.1 for i in range(2000)])
    assert abs(d - 0.1) < 0.002
    assert p < 0.01
    # ...and interleaved halves of one sample are not.
    values = [(i * 7919) % 10007 / 10007 for i in range(4000)]
    d, p = ks_two_sample(values[::2], values[1::2])
    assert p > 0.5


def test_the_mcp_scenario_measures_servers_workers_and_the_sdk(redis_server: RedisServer) -> None:
    url = redis_server.url
    before = bench_keys(url)
    done = subprocess.run(
        [sys.executable, "-m", "redis_tasks", "bench", "mcp", "--redis-url", url, *MCP_TINY,
         "--json", "-", "--quiet"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    mcp = results["mcp"]
    assert mcp["system"] == "redis-tasks"
    assert (mcp["completed"], mcp["errors"], mcp["lost"]) == (40, 0, 0)
    assert mcp["rate"] > 0
    assert 0 < mcp["p50"] <= mcp["p99"]
    assert 0 < mcp["create_p50"] <= mcp["create_p99"] <= mcp["p99"]
    assert mcp["polls_per_task"] >= 1
    for part in ("servers", "workers", "redis", "clients"):
        assert mcp[f"{part}_us_per_task"] > 0, part
    for phase, unit in (("get", "poll"), ("sdk_call", "call")):
        row = mcp[phase]
        assert row["rate"] > 0
        assert row["errors"] == 0, row["error_kinds"]
        assert row[f"servers_us_per_{unit}"] > 0
        assert row["per_server_core"] > 0
    library = mcp["library"]
    assert library["find_task_us"] > 0
    assert library["library_us"] >= library["find_task_us"]
    share = mcp["share"]
    assert 0 < share["library"] < 1
    assert abs(share["library"] + share["sdk_http"] - 1) < 0.002
    assert results["settings"]["mcp"]["tasks"] == 40
    assert bench_keys(url) == before
    assert url not in done.stdout


def test_the_mcp_table_lines() -> None:
    run = results(ours_drain=3000, ours_p99=1.4, find=10_000)
    row = {"rate": 900, "p50": 2.0, "p99": 9.0, "errors": 0, "servers_us_per_poll": 500,
           "per_server_core": 2000, "clients_us_per_poll": 90}  # fmt: skip
    run["mcp"] = {
        "system": "redis-tasks", "servers": 2, "workers": 2, "clients": 64, "poll_ms": 20,
        "pollers": 64, "rate": 700, "p50": 30.0, "p99": 80.0, "create_p50": 5.0,
        "create_p99": 20.0, "errors": 0, "lost": 0, "polls_per_task": 1.2,
        "servers_us_per_task": 2000, "workers_us_per_task": 900, "redis_us_per_task": 300,
        "get": row, "sdk_call": {**row, "servers_us_per_call": 480},
        "library": {"authorize_us": 3.0, "find_task_us": 25.0, "render_us": 6.0},
        "share": {"library": 0.068, "sdk_http": 0.932, "library_us": 34.0,
                  "sdk_http_us": 466.0},
    }  # fmt: skip
    text = table(run)
    assert "mcp (redis-tasks, 2 servers, 2 workers, 64 clients, poll 20 ms): 700 tasks/s" in text
    assert "CPU us/task: servers 2000 + workers 900 + Redis 300" in text
    assert "tasks/get, 64 pollers: 900 polls/s" in text
    assert "library 34.0 us (7%: authorize 3.0 + find_task 25.0 + render 6.0)" in text


async def test_the_lean_mcp_client_reads_json_chunked_sse_and_errors() -> None:
    from redis_tasks._bench._mcp_connection import Connection, Endpoint, RpcFailure, Wire

    seen: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError):  # the client hung up
            await answer(reader, writer)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while head := await reader.readuntil(b"\r\n\r\n"):
            seen.append(head)
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            request = json.loads(await reader.readexactly(length))
            method, rid = request["method"], request["id"]
            if method == "tasks/get":  # an SSE stream, chunked, a notification first
                events = (
                    b'event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/x"}\r\n\r\n'
                    + f'event: message\r\ndata: {{"jsonrpc":"2.0","id":{rid},'.encode()
                    + b'"result":{"status":"completed"}}\r\n\r\n'
                )
                chunks = b"".join(
                    f"{len(part):x}\r\n".encode() + part + b"\r\n"
                    for part in (events[:30], events[30:])
                )
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"
                )
            else:
                body = json.dumps(
                    {"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "x"}}
                    if method == "tasks/cancel"
                    else {"jsonrpc": "2.0", "id": rid, "result": {"resultType": "task"}}
                ).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(body)}\r\n\r\n".encode()
                    + body
                )
            await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = Connection(Endpoint("127.0.0.1", port), Wire(token="t0ken"), timeout=10)
    try:
        await conn.open()
        assert await conn.call("tools/call", {"name": "noop"}, name="noop") == {
            "resultType": "task"
        }
        assert await conn.call("tasks/get", {"taskId": "7.x"}, name="7.x") == {
            "status": "completed"
        }
        with pytest.raises(RpcFailure) as failure:
            await conn.call("tasks/cancel", {"taskId": "7.x"}, name="7.x")
        assert failure.value.kind == "rpc -32602"
    finally:
        await conn.close()
        server.close()
        await server.wait_closed()
    assert b"Authorization: Bearer t0ken\r\n" in seen[0]
    assert b"Mcp-Method: tools/call\r\nMcp-Name: noop\r\n" in seen[0]
    assert b"MCP-Protocol-Version: 2026-07-28\r\n" in seen[0]


def test_the_mcp_peer_needs_its_app_and_interpreter(tmp_path: Path) -> None:
    from redis_tasks._bench._mcp_settings import McpSettings
    from redis_tasks._bench._mcp_systems import mcp_system

    missing = McpSettings(peer_python=str(tmp_path / "python"), peers_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no MCP peer app"):
        mcp_system("redis://127.0.0.1:1/0", "bench-x", missing, "fastmcp-tasks")
    (tmp_path / "fastmcp_tasks_app.py").write_text("")
    with pytest.raises(FileNotFoundError, match="interpreter"):
        mcp_system("redis://127.0.0.1:1/0", "bench-x", missing, "fastmcp-tasks")
    found = McpSettings(peer_python=sys.executable, peers_dir=str(tmp_path))
    system = mcp_system("redis://127.0.0.1:1/0", "bench-x", found, "fastmcp-tasks")
    assert (system.name, system.is_ours) == ("fastmcp-tasks", False)
    assert system.keys == ("bench-x:*", "{bench-x}:*")  # its keys are deleted after a run
    assert mcp_system("redis://127.0.0.1:1/0", "bench-x", found, None).is_ours
    with pytest.raises(ValueError, match="unknown MCP peer"):
        mcp_system("redis://127.0.0.1:1/0", "bench-x", found, "other")


FASTMCP_PYTHON = Path(__file__).resolve().parents[2] / "benchmarks/.venv-fastmcp/bin/python"


@pytest.mark.skipif(
    not FASTMCP_PYTHON.is_file(), reason="no fastmcp-tasks venv (make bench-fastmcp)"
)
def test_the_mcp_scenario_loads_fastmcp_tasks_beside_ours(redis_server: RedisServer) -> None:
    url = redis_server.url
    client = redis.Redis.from_url(url)
    try:
        before = set(client.scan_iter(match=ANY_RUN, count=1000))
    finally:
        client.close()
    done = subprocess.run(
        [sys.executable, "-m", "redis_tasks", "bench", "mcp", "--redis-url", url, *MCP_TINY,
         "--mcp-peer", "fastmcp-tasks", "--mcp-peer-python", str(FASTMCP_PYTHON),
         "--json", "-", "--quiet"],
        capture_output=True, text=True, timeout=300, check=False,
        cwd=FASTMCP_PYTHON.parent.parent.parent.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    peer = results["mcp_peers"]["fastmcp-tasks"]
    assert (peer["completed"], peer["errors"], peer["lost"]) == (40, 0, 0)
    assert peer["get"]["errors"] == peer["sdk_call"]["errors"] == 0
    assert peer["ours_over_it"]["tasks_per_s"] > 0
    assert "library" not in peer  # the in-process timing is of our library only
    client = redis.Redis.from_url(url)
    try:
        assert set(client.scan_iter(match=ANY_RUN, count=1000)) == before
    finally:
        client.close()


def test_the_loop_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    from redis_tasks._loop import loop_name, run

    monkeypatch.delenv("REDIS_TASKS_LOOP", raising=False)
    assert loop_name() == "uvloop"  # installed with the dev extra
    assert loop_name("asyncio") == "asyncio"
    monkeypatch.setenv("REDIS_TASKS_LOOP", "asyncio")
    assert loop_name() == "asyncio"
    with pytest.raises(ValueError, match="unknown event loop"):
        loop_name("trio")

    async def which() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert run(which(), "uvloop").startswith("uvloop")
    assert run(which(), "asyncio").startswith("asyncio")


def test_uvloop_runs_beside_the_default_loop(redis_server: RedisServer) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "redis_tasks", "bench", "pickup", "--uvloop", "--redis-url",
         redis_server.url, "--pickups", "3", "--rounds", "1", "--json", "-", "--quiet"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    systems = json.loads(done.stdout)["systems"]
    assert systems["redis-tasks+uvloop"]["pickup"]["samples"] == 3
    assert systems["redis-tasks"]["pickup"]["samples"] == 3


def test_metrics_and_traces_run_beside_the_default(redis_server: RedisServer) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "redis_tasks", "bench", "drain", "--metrics", "--traces",
         "--redis-url",
         redis_server.url, "--tasks", "200", "--workers", "1", "--rounds", "1", "--json", "-",
         "--quiet"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    systems = json.loads(done.stdout)["systems"]
    assert systems["redis-tasks+metrics"]["drain"]["1"]["rate"] > 0
    assert systems["redis-tasks+traces"]["drain"]["1"]["rate"] > 0
    assert systems["redis-tasks"]["drain"]["1"]["rate"] > 0
