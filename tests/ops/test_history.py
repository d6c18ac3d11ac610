"""The history checker (benchmarks/history): it explains what a correct system answers,
however the operations overlap, and it finds each kind of anomaly a fault could cause,
reported with the smallest sub-history that shows it."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from benchmarks.history.checker import Anomaly, check
from benchmarks.history.cluster import CLUSTER_KINDS
from benchmarks.history.faults import classify, record_with_faults
from benchmarks.history.model import answer
from benchmarks.history.ops import Op, dumps, loads
from benchmarks.history.promises import breaches
from benchmarks.history.recorder import (
    LOST_CLAIM_RUNS_WITHIN,
    Entry,
    Recorder,
    histories,
    run_clients,
    run_workers,
)
from tests.support.backends import Backend

RESULT = {"content": [], "isError": False}


def seen(
    status: str, *, asking: tuple[str, ...] = (), result: Any = None, error: Any = None
) -> Any:
    """A find_task answer as the history records it."""
    return {"status": status, "message": None, "result": result, "error": error,
            "asking": list(asking)}  # fmt: skip


WORKING = seen("working")
COMPLETED = seen("completed", result=RESULT)


Row = tuple[str, str, float, float | None, Any, dict[str, Any]]


def history(*rows: Row) -> list[Op]:
    """Operations from (process, kind, invoke, return, value, args) rows."""
    return [
        Op(i, process, kind, invoke, ret, value, args)
        for i, (process, kind, invoke, ret, value, args) in enumerate(rows)
    ]


CREATE: Row = ("c", "create", 0.0, 1.0, "ok", {})


def checked(ops: list[Op]) -> list[Anomaly]:
    return asyncio.run(check({"t": ops}))


@pytest.mark.parametrize("during", [WORKING, COMPLETED])
def test_a_read_overlapping_an_outcome_may_see_either_side(during: Any) -> None:
    ops = history(
        CREATE,
        ("c", "find", 2.0, 3.0, WORKING, {}),
        ("w", "complete", 4.0, 6.0, "ok", {"result": RESULT}),
        ("c", "find", 5.0, 7.0, during, {}),
        ("c", "find", 8.0, 9.0, COMPLETED, {}),
        ("c", "cancel", 10.0, 11.0, "ok", {}),
        ("w", "fail", 12.0, 13.0, "terminal", {"code": -32001}),
    )
    assert checked(ops) == []


def test_a_lost_batch_claim_started_before_a_create_may_have_claimed_it() -> None:
    """A batch claim nobody heard back from, started before the task's create, may have
    run on the server after it (a retried call's first attempt): the task's cancel then
    finds a lease and only records the intent. Without that claim, the same is no
    linearization."""
    rows: list[Row] = [
        ("c", "cancel", 2.0, 3.0, "ok", {}),
        ("c", "find", 4.0, 5.0, WORKING, {}),
    ]
    assert len(checked(history(CREATE, *rows))) == 1
    lost: Row = ("w", "claim", -1.0, None, None, {})
    assert checked(history(lost, CREATE, *rows)) == []


def test_an_input_round_and_its_answers_are_explained() -> None:
    ops = history(
        CREATE,
        ("w", "request_input", 2.0, 3.0, ["ok", {}], {"keys": ["k"]}),
        ("c", "find", 4.0, 5.0, seen("input_required", asking=("k",)), {}),
        ("c", "update", 6.0, 7.0, "ok", {"answers": {"k": answer("k")}}),
        ("c", "find", 8.0, 9.0, WORKING, {}),
    )
    assert checked(ops) == []


def test_an_operation_nobody_heard_back_from_may_have_happened_or_not() -> None:
    unknown = ("w", "complete", 2.0, None, None, {"result": RESULT})
    assert checked(history(CREATE, unknown, ("c", "find", 3.0, 4.0, WORKING, {}))) == []
    assert checked(history(CREATE, unknown, ("c", "find", 3.0, 4.0, COMPLETED, {}))) == []
    # But not both ways round: once read as done, it stays done.
    flip = history(
        CREATE,
        unknown,
        ("c", "find", 3.0, 4.0, COMPLETED, {}),
        ("c", "find", 5.0, 6.0, WORKING, {}),
    )
    assert len(checked(flip)) == 1


PLANTED: dict[str, tuple[list[Row], list[int]]] = {
    # A read after an acknowledged outcome that answers the state before it.
    "stale read": (
        [("w", "complete", 2.0, 3.0, "ok", {"result": RESULT}),
         ("c", "find", 4.0, 5.0, WORKING, {})],
        [0, 1, 2],
    ),
    # An acknowledged outcome gone later, the task read as working again.
    "lost acknowledgement": (
        [("c", "find", 2.0, 3.0, WORKING, {}),
         ("w", "complete", 4.0, 5.0, "ok", {"result": RESULT}),
         ("c", "find", 6.0, 7.0, COMPLETED, {}),
         ("c", "find", 8.0, 9.0, WORKING, {})],
        [0, 2, 4],  # with "find completed" it is the same anomaly: the smaller one stays
    ),
    # Two outcomes both acknowledged: exactly one terminal transition may win.
    "two winners": (
        [("w", "complete", 2.0, 3.0, "ok", {"result": RESULT}),
         ("v", "fail", 4.0, 5.0, "ok", {"code": -32001})],
        [0, 1, 2],
    ),
    # A create acknowledged, then the task not found.
    "create then not found": (
        [("c", "find", 2.0, 3.0, None, {})],
        [0, 1],
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(PLANTED))
def test_a_planted_anomaly_is_found_with_its_smallest_history(name: str) -> None:
    rows, minimal = PLANTED[name]
    (anomaly,) = checked(history(CREATE, *rows))
    assert not anomaly.undecided
    assert [op.index for op in anomaly.history] == minimal, anomaly.describe()
    assert "no linearization" in anomaly.describe()


#: Each planted anomaly, and the promise of ``wait_replicas`` it breaks.
BROKEN = {
    "stale read": "outcome lost",
    "lost acknowledgement": "outcome lost",
    "two winners": "two winners",
    "create then not found": "create lost",
}
ASKED_K = seen("input_required", asking=("k",))
MORE_BROKEN: dict[str, list[Row]] = {
    "answer lost": [
        ("w", "request_input", 2.0, 3.0, ["ok", {}], {"keys": ["k"]}),
        ("c", "update", 4.0, 5.0, "ok", {"answers": {"k": answer("k")}}),
        ("c", "find", 6.0, 7.0, ASKED_K, {}),
    ],
    "cancellation lost": [
        ("c", "cancel", 2.0, 3.0, "ok", {}),
        ("w", "claim", 4.0, 5.0, "run", {}),
    ],
}  # fmt: skip


@pytest.mark.parametrize("name", [*BROKEN, *MORE_BROKEN])
def test_each_broken_promise_is_named(name: str) -> None:
    rows = PLANTED[name][0] if name in PLANTED else MORE_BROKEN[name]
    found = list(breaches("t", history(CREATE, *rows)))
    assert [b.kind for b in found] == [BROKEN.get(name, name)], found
    assert len(checked(history(CREATE, *rows))) == 1  # the search finds it too


def test_an_acknowledged_create_lost_is_named_so_whatever_read_timed_out_meanwhile() -> None:
    """A read nobody heard back from changed nothing: it is no part of the smallest
    history, and the anomaly is the acknowledged task lost (as wait_replicas=0 shows)."""
    ops = history(
        CREATE,
        ("c", "find", 2.0, None, None, {}),
        ("c", "find", 3.0, 4.0, None, {}),
    )
    (anomaly,) = checked(ops)
    assert [op.index for op in anomaly.history] == [0, 2]
    assert classify(anomaly) == "acknowledged task lost"
    assert [b.kind for b in breaches("t", ops)] == ["create lost"]


def test_an_unconfirmed_write_seen_then_rolled_back_breaks_no_promise() -> None:
    """What a failover can do to a write whose caller heard nothing back: a read sees
    it, a later one does not. No order explains it, but nobody was told it succeeded."""
    ops = history(
        CREATE,
        ("w", "complete", 2.0, None, None, {"result": RESULT}),
        ("c", "find", 3.0, 4.0, COMPLETED, {}),
        ("c", "find", 5.0, 6.0, WORKING, {}),
    )
    (anomaly,) = checked(ops)
    assert [op.index for op in anomaly.history] == [0, 1, 2, 3]  # the unknown one kept
    assert classify(anomaly) == "unconfirmed write seen, then rolled back"
    assert list(breaches("t", ops)) == []


def test_a_history_reads_back_from_json_lines() -> None:
    ops = history(
        CREATE,
        ("w", "request_input", 2.0, 3.0, ["ok", {}], {"keys": ["k"]}),
        ("w", "complete", 4.0, None, None, {"result": RESULT}),
    )
    assert loads(dumps(ops)) == ops


def test_a_lost_batch_claim_is_placed_on_the_tasks_it_may_have_met_only() -> None:
    """A batch claim of unknown outcome marks its partition: it may have claimed a task
    created before its last moment on a server (its answer, or for a call that failed,
    ``LOST_CLAIM_RUNS_WITHIN`` after its start), never one created after that."""

    def entry(task: str, kind: str, invoke: float, ret: float | None = None) -> Entry:
        return Entry(task, "p", kind, invoke, ret, "ok" if ret is not None else None)

    def mark(invoke: float, until: float) -> Entry:
        return Entry("#partition:3", "w", "claim", invoke, None, None, {"until": until})

    tasks = [("3.early", 1.0), ("3.during", 5.0), ("3.after", 5.0 + LOST_CLAIM_RUNS_WITHIN)]
    rows = [row for task, at in tasks for row in (entry(task, "create", at, at + 0.1),)]
    rows += [entry(task, "find", at + 6.0, at + 6.1) for task, at in tasks]
    rows.append(entry("4.elsewhere", "find", 6.0, 6.1))

    def marked(*marks: Entry) -> set[str]:
        found = histories([*rows, *marks])
        return {task for task, ops in found.items() if any(op.kind == "claim" for op in ops)}

    assert marked(mark(4.0, 4.0 + LOST_CLAIM_RUNS_WITHIN)) == {"3.early", "3.during"}
    assert marked(mark(4.0, 4.5)) == {"3.early"}  # answered at 4.5, after a retry


def test_an_operation_cannot_return_before_it_was_invoked() -> None:
    with pytest.raises(ValueError):
        Op(0, "c", "find", 2.0, 1.0)
    with pytest.raises(ValueError):
        Op(0, "c", "explode", 1.0, 2.0)


async def test_a_recorded_load_on_redis_has_no_anomaly(standalone_backend: Backend) -> None:
    """Clients and workers on one Redis, no faults: every task's history is explained,
    and the histories hold every kind of operation (so the check checked something)."""
    m = standalone_backend.manager
    recorder = Recorder("p0")
    rng = random.Random(7)
    until = time.monotonic() + 3.0
    await asyncio.gather(
        run_clients(m, recorder, clients=8, until=until, rng=rng, cancel_share=0.1),
        run_workers(m, recorder, workers=3, until=until + 1.0, rng=rng),
    )
    tasks = histories(recorder.entries)
    kinds = Counter(op.kind for ops in tasks.values() for op in ops)
    assert len(tasks) > 20, kinds
    assert {
        "create",
        "find",
        "claim",
        "request_input",
        "park",
        "update",
        "complete",
        "fail",
    } <= set(kinds), kinds
    anomalies = await check(tasks)
    assert anomalies == [], "\n".join(a.describe() for a in anomalies)


async def test_restarts_and_killed_connections_leave_no_anomaly(tmp_path: Path) -> None:
    """A short run of issue 26's faults on one Redis (``appendfsync always``, the setting
    the Durability page recommends): SIGKILL restarts and every connection killed, in turn."""
    run = await record_with_faults(
        tmp_path, seconds=8.0, every=1.5, clients=8, workers=3, kinds=("restart", "kill")
    )
    assert run.faults["restart"] >= 2, run.faults
    assert run.faults["kill"] >= 2, run.faults
    assert run.tasks > 50
    assert run.anomalies == [], "\n".join(a.describe() for a in run.anomalies)


@pytest.mark.slow
async def test_a_cluster_under_every_fault_keeps_the_promises_of_wait_replicas(
    tmp_path: Path,
) -> None:
    """The short cluster run (about 30 s): one fault of each kind, failovers with and
    without a lagging replica, a slot migrated, a pause, connections killed, on a 3+3
    cluster with the default settings (``wait_replicas="auto"``: one replica, where a
    primary has one online). No
    acknowledged write is lost; what the search still reports is a read of a write
    nobody was told succeeded, which Redis's replication cannot prevent."""
    run = await record_with_faults(
        tmp_path,
        seconds=5.0,
        topology="cluster",
        each=1,
        every=0.5,
        clients=8,
        workers=3,
    )
    assert all(run.faults[k] >= 1 for k in CLUSTER_KINDS), run.faults
    assert run.missed_bytes  # a lagging failover ran (how far it lagged: the long runs)
    assert run.tasks > 50
    assert run.breaches == [], "\n".join(b.describe() for b in run.breaches)
    kinds = {classify(a) for a in run.anomalies}
    assert kinds <= {"unconfirmed write seen, then rolled back"}, [
        a.describe() for a in run.anomalies
    ]
