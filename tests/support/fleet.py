"""Worker processes for tests: start ``redis-tasks worker`` processes, read their logs.

Workers run the CLI (``python -m redis_tasks worker tests.support.handlers:handler``);
handlers report to Redis lists so tests wait on conditions, never on time. Their logs
name a task by its reference (``task_ref``), never its ID: the ``fleet`` fixture
checks every line of every worker not started with ``--whole-task-ids``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis_tasks import RedisTaskManager, TaskRequestContext, TaskStatus, task_ref

from .helpers import ALICE, ORIGIN, wait_until, whole_task_ids

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class WorkerProcess:
    """One ``redis-tasks worker`` process and its JSON log."""

    process: subprocess.Popen[bytes]
    log_path: Path
    name: str
    whole_task_ids: bool = False  # started with --whole-task-ids

    def events(self) -> list[dict[str, Any]]:
        lines = self.log_path.read_text().splitlines() if self.log_path.exists() else []
        return [json.loads(line) for line in lines if line.startswith("{")]

    def signal(self, sig: int) -> None:
        self.process.send_signal(sig)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)


@dataclass
class Fleet:
    """Starts worker processes for one test and cleans them up."""

    url: str
    prefix: str
    namespace: str
    directory: Path
    cluster: bool = False
    workers: list[WorkerProcess] = field(default_factory=list)

    def start(
        self,
        *options: str,
        name: str | None = None,
        handler: str = "tests.support.handlers:handler",
        env: dict[str, str] | None = None,
    ) -> WorkerProcess:
        """Start a worker running ``handler`` with ``options`` (and ``env`` added)."""
        name = name or f"w{len(self.workers)}"
        log_path = self.directory / f"{name}.log"
        env = {
            **os.environ,
            "RT_TEST_REDIS_URL": self.url,
            "RT_TEST_NS": self.namespace,
            "RT_TEST_CLUSTER": "1" if self.cluster else "",
            **(env or {}),
        }
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "redis_tasks",
                "worker",
                handler,
                "--redis-url",
                self.url,
                "--prefix",
                self.prefix,
                "--name",
                name,
                *options,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log_path.open("wb"),
        )
        worker = WorkerProcess(process, log_path, name, "--whole-task-ids" in options)
        self.workers.append(worker)
        return worker

    async def wait_started(self) -> None:
        """Until every worker started so far logged that it runs."""

        async def all_running() -> bool:
            return all(
                any(e.get("event") == "worker_started" for e in w.events()) for w in self.workers
            )

        await wait_until(all_running, within=60, what="the workers to start")

    def stop_all(self) -> None:
        for worker in self.workers:
            worker.kill()

    def whole_ids_logged(self) -> list[str]:
        """The log lines holding a whole task ID, of workers that were not told to."""
        return [
            line
            for w in self.workers
            if not w.whole_task_ids and w.log_path.exists()
            for line in w.log_path.read_text(errors="replace").splitlines()
            if whole_task_ids(line)
        ]


async def create(manager: RedisTaskManager, **payload: Any) -> str:
    task = await manager.create_task(ALICE, ORIGIN, payload=json.dumps(payload).encode())
    return task.task_id


async def next_start(control: Any, fleet: Fleet, within: float = 30) -> dict[str, Any]:
    """The next "handler started" report."""
    popped = await control.blpop([f"{fleet.namespace}:started"], timeout=within)
    assert popped is not None, "no handler started in time"
    started: dict[str, Any] = json.loads(popped[1])
    return started


async def go(control: Any, fleet: Fleet, started: dict[str, Any]) -> None:
    """Let the handler of one run finish."""
    await control.rpush(f"{fleet.namespace}:go:{started['task']}:{started['fence']}", 1)


async def terminal(manager: RedisTaskManager, task_id: str, within: float = 60) -> Any:
    async def done() -> Any:
        task = await manager.find_task(TaskRequestContext(ALICE, task_id))
        return task if task is not None and task.is_terminal else None

    return await wait_until(done, within=within, what="a terminal task")


async def recorded(workers: list[WorkerProcess], task_ids: set[str]) -> Counter[str]:
    """Completions per task reference once every task in ``task_ids`` shows up in the
    logs (which name tasks by reference).

    A worker logs a completion right after writing it, so a test can see the task
    terminal a moment before the line is in the log: wait for the lines. Only
    completions are counted; a task whose run ended otherwise counts 0.
    """
    refs = {task_ref(task_id) for task_id in task_ids}

    async def logged() -> Counter[str] | None:
        outcomes = finishes(workers)
        return outcomes if refs <= set(outcomes) else None

    await wait_until(logged, within=30, what="the workers' logs")
    return completions(workers)


#: Log events that record a completion: confirmed, or applied without its replicas' word.
COMPLETED = ("task_complete", "outcome_unconfirmed")


#: Log events that end a worker's run of a task, whatever became of the outcome.
SETTLED = (*COMPLETED, "already_terminal", "finish_abandoned")


def finishes(workers: list[WorkerProcess]) -> Counter[str]:
    """Runs that ended, per task reference: completed, found already applied by their
    retry, or given up after the lease (the outcome may have landed; the task is read
    back)."""
    return Counter(e["task"] for w in workers for e in w.events() if e.get("event") in SETTLED)


def completions(workers: list[WorkerProcess]) -> Counter[str]:
    """How often each task (by reference) was recorded completed by any worker."""
    return Counter(e["task"] for w in workers for e in w.events() if e.get("event") in COMPLETED)


async def all_completed_once(
    manager: RedisTaskManager, workers: list[WorkerProcess], created: list[str], within: float = 180
) -> None:
    """Every task in ``created`` is found and ends completed, and no worker recorded
    any of them completed twice."""

    async def finished() -> bool:
        for task_id in created:
            task = await manager.find_task(TaskRequestContext(ALICE, task_id))
            assert task is not None, "a task whose create returned was lost"
            if not task.is_terminal:
                return False
        return True

    await wait_until(finished, within=within, what="every created task to end")
    for task_id in created:
        task = await manager.find_task(TaskRequestContext(ALICE, task_id))
        assert task is not None
        assert task.status is TaskStatus.COMPLETED
    done = await recorded(workers, set(created))
    # No task was recorded completed twice: no reference more often than it has tasks
    # (two of the tasks may share one, at odds of about n^2 / 2^37).
    sharing = Counter(task_ref(task_id) for task_id in created)
    twice = {ref: n for ref, n in done.items() if n > max(sharing[ref], 1)}
    assert twice == {}, twice
