"""The ``parking`` scenario's figures: from its rounds, its targets, and its table lines."""

from __future__ import annotations

import statistics
from typing import Any, Final

from ._bench_base import Settings
from ._progress import percentile

__all__ = ["parking_figures", "parking_lines", "parking_targets"]

#: Issue 50's bounds: B's p99 beside the parked tasks, answer-to-resume p99, a stop.
_B_P99_MS: Final = 50.0
_RESUME_P99_MS: Final = 100.0
_STOP_S: Final = 2.0
#: Commands a second the parked tasks may add to an idle worker's (none is sent for
#: them; the idle worker's own reads and marks vary by a few a second).
_PARKED_CALLS_SLACK: Final = 5.0


def _quantiles(samples: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(samples, 0.5), 1),
        "p99": round(percentile(samples, 0.99), 1),
        "max": round(max(samples), 1),
    }


def parking_figures(rows: list[dict[str, Any]], settings: Settings) -> dict[str, Any]:
    """The rounds' figures: latencies pooled over the rounds, the rest their medians
    (counts: their sums, so a single miss shows)."""

    def pooled(key: str) -> list[float]:
        return [value for row in rows for value in row[key]]

    def median(key: str) -> float:
        return round(float(statistics.median(row[key] for row in rows)), 3)

    def total(key: str) -> int:
        return sum(int(row[key]) for row in rows)

    return {
        "rounds": len(rows),
        "tasks": settings.park_tasks,
        "concurrency": settings.park_concurrency,
        "late": settings.park_late,
        "idle_s": settings.park_idle_s,
        "idle_b": _quantiles(pooled("idle_b_ms")),
        "beside_b": _quantiles(pooled("beside_b_ms")),
        "parked_s": median("parked_s"),
        "memory_per_parked": round(median("memory_per_parked")),
        "handlers_inside": max(int(row["handlers_inside"]) for row in rows),
        "idle_calls_per_s": median("idle_calls_per_s"),
        "parked_calls_per_s": median("parked_calls_per_s"),
        "new_at_once": _quantiles(pooled("burst_ms")),
        "new_at_once_from_call": _quantiles(pooled("burst_call_ms")),
        "resume": _quantiles(pooled("answer_ms")),
        "answer_call": _quantiles(pooled("answer_call_ms")),
        "resume_after_accepted": _quantiles(pooled("accepted_ms")),
        "answered": total("answered"),
        "resumed": total("resumed"),
        "resumed_twice": total("resumed_twice"),
        "completed": total("completed"),
        "completed_twice": total("completed_twice"),
        "stop_s": round(max(row["stop_s"] for row in rows), 3),
        "stop_codes": sorted({int(row["stop_code"]) for row in rows}),
    }


def parking_targets(parking: dict[str, Any] | None) -> dict[str, Any]:
    """Issue 50's targets, met or not, on what was measured."""
    if not parking:
        return {}
    added = parking["parked_calls_per_s"] - parking["idle_calls_per_s"]
    return {
        "parking_b_p99_at_most_50ms_beside_the_parked": {
            "b_p99_ms": parking["beside_b"]["p99"],
            "idle_b_p99_ms": parking["idle_b"]["p99"],
            "met": parking["beside_b"]["p99"] <= _B_P99_MS,
        },
        "parking_no_handler_and_no_command_for_the_parked": {
            "handlers_inside": parking["handlers_inside"],
            "calls_per_s_added": round(added, 2),
            "met": parking["handlers_inside"] == 0 and added <= _PARKED_CALLS_SLACK,
        },
        "parking_every_answered_task_resumes_and_completes_once": {
            "answered": parking["answered"],
            "resumed": parking["resumed"],
            "completed": parking["completed"],
            "met": parking["answered"] == parking["resumed"] == parking["completed"]
            and parking["resumed_twice"] == parking["completed_twice"] == 0,
        },
        # From the answer accepted (its update call returned): one client process
        # sending a thousand answers at once takes longer itself than the bound.
        "parking_resume_p99_at_most_100ms_after_the_answer": {
            "resume_p99_ms": parking["resume_after_accepted"]["p99"],
            "from_the_call_p99_ms": parking["resume"]["p99"],
            "answer_call_p99_ms": parking["answer_call"]["p99"],
            # The yardstick: as many new tasks created at once on the same worker.
            "new_at_once_p99_ms": parking["new_at_once"]["p99"],
            "met": parking["resume_after_accepted"]["p99"] <= _RESUME_P99_MS,
        },
        "parking_sigterm_under_2s": {
            "stop_s": parking["stop_s"],
            "met": parking["stop_s"] < _STOP_S and parking["stop_codes"] == [0],
        },
    }


def parking_lines(parking: dict[str, Any]) -> list[str]:
    """The ``parking`` figures as lines of the printed table."""
    idle, beside, resume = parking["idle_b"], parking["beside_b"], parking["resume"]
    after = parking["resume_after_accepted"]
    new, new_after = parking["new_at_once_from_call"], parking["new_at_once"]
    return [
        f"parking: 1 worker process at concurrency {parking['concurrency']}; tenant A's "
        f"{parking['tasks']} tasks each ask a question nobody answers; tenant B creates "
        f"{parking['late']} plain tasks, one every 10 ms ({parking['rounds']} round"
        f"{'s' if parking['rounds'] > 1 else ''})",
        f"  all parked after {parking['parked_s']} s; Redis memory {parking['memory_per_parked']}"
        f" bytes a parked task; handlers inside the worker while they wait: "
        f"{parking['handlers_inside']}",
        f"  Redis commands a second over {parking['idle_s']} s: {parking['parked_calls_per_s']}"
        f" with them parked, {parking['idle_calls_per_s']} on the idle worker",
        f"  B create-to-start p50 {beside['p50']} / p99 {beside['p99']} / max {beside['max']} ms"
        f" beside them; {idle['p50']} / {idle['p99']} / {idle['max']} ms on the idle worker",
        f"  {parking['answered']} answered at once: answer-to-resume p50 {resume['p50']} / p99 "
        f"{resume['p99']} / max {resume['max']} ms from the answer's call, "
        f"{after['p50']} / {after['p99']} / {after['max']} ms from its return; resumed "
        f"{parking['resumed']} "
        f"({parking['resumed_twice']} twice), completed {parking['completed']} "
        f"({parking['completed_twice']} twice); the answers' calls p50 "
        f"{parking['answer_call']['p50']} / p99 {parking['answer_call']['p99']} ms",
        f"  beside it, {parking['answered']} new plain tasks created at once: create-to-start "
        f"p50 {new['p50']} / p99 {new['p99']} / max {new['max']} ms from the create's call, "
        f"{new_after['p50']} / {new_after['p99']} / {new_after['max']} ms from its return",
        f"  SIGTERM with the rest parked: stopped in {parking['stop_s']} s "
        f"(exit {', '.join(str(c) for c in parking['stop_codes'])})",
    ]
