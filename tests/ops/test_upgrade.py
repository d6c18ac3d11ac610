"""A rolling upgrade from 0.2.0 (revision ``f470e92``) to this checkout, on one Redis
and one prefix: 0.2.0's creators and workers beside this checkout's, then the old
ones gone, and nothing lost or stranded.

The old revision is taken from git (``git archive``: a clone has it) and run from a
directory of its own by this interpreter (its dependencies are this checkout's); each
process runs one role of ``tests/support/upgrade_roles.py``. The order is the
documented one (docs/operations/upgrading.md): what answers tasks first (here the test
process, on this checkout), then workers, rolling.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from redis_tasks import (
    RedisTaskManager,
    TaskRequestContext,
    TaskStatus,
    TaskUpdateContext,
    __version__,
)
from redis_tasks.testing import RedisServer
from tests.support.helpers import ELICIT_ANSWER, wait_until
from tests.support.upgrade_roles import ORIGIN, WHO

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "tests" / "support" / "upgrade_roles.py"
#: The last revision of 0.2.0 (CHANGELOG.md names it).
OLD_REVISION = "f470e92"


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """0.2.0's package and scripts, as ``git archive`` gives them."""
    tree = tmp_path_factory.mktemp("redis-tasks-0.2.0")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", OLD_REVISION, "redis_tasks", "lua"],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        shallow = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"],
            capture_output=True,
            text=True,
            check=False,
        )
        if shallow.stdout.strip() == "true":
            # .ci/run deepens a shallow clone first; one it could not deepen lacks 0.2.0.
            pytest.skip(f"a shallow clone without revision {OLD_REVISION}")
        pytest.fail(f"revision {OLD_REVISION} is not in this clone: {archive.stderr.decode()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    return tree


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def _create(tree: Path, url: str, prefix: str, *specs: str) -> list[list[str]]:
    """The IDs of the tasks ``tree``'s revision creates for each ``KIND:COUNT:TENANT``;
    that it was ``tree``'s package that made them is checked."""
    done = subprocess.run(
        [sys.executable, str(ROLES), url, prefix, "create", *specs],
        cwd=tree,
        env=_env(tree),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert Path(report["file"]).is_relative_to(tree)
    assert report["version"] == "0.2.0" != __version__  # the releases tell themselves apart
    ids: list[list[str]] = report["ids"]
    return ids


class _Workers:
    """The worker processes of one test, each of either revision."""

    def __init__(self, url: str, prefix: str, logs: Path) -> None:
        self.url, self.prefix, self.logs = url, prefix, logs
        self.running: dict[str, subprocess.Popen[str]] = {}

    def start(self, tree: Path, name: str, concurrency: int, *, hold: bool) -> None:
        log = (self.logs / f"{name}.log").open("w")
        process = subprocess.Popen(
            [sys.executable, str(ROLES), self.url, self.prefix, "worker", name, str(concurrency),
             "1" if hold else "0"],
            cwd=tree,
            env=_env(tree),
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )  # fmt: skip
        self.running[name] = process
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready", (self.logs / f"{name}.log").read_text()

    def stop(self, name: str) -> int:
        """SIGTERM ``name`` and wait for it: its exit status."""
        process = self.running.pop(name)
        process.send_signal(signal.SIGTERM)
        return process.wait(timeout=30)

    def kill_all(self) -> None:
        for process in self.running.values():
            process.kill()
            process.wait()


@pytest.fixture
def workers(redis_server: RedisServer, prefix: str, tmp_path: Path) -> Iterator[_Workers]:
    running = _Workers(redis_server.url, prefix, tmp_path)
    try:
        yield running
    finally:
        running.kill_all()


async def test_a_rolling_upgrade_from_0_2_loses_and_strands_nothing(
    redis_server: RedisServer, prefix: str, old_tree: Path, workers: _Workers
) -> None:
    url = redis_server.url
    async with RedisTaskManager.from_url(url, prefix=prefix) as m:
        # 0.2.0 alone: a worker whose four slots hold tasks that never end by themselves
        # (three that block, one waiting for its client's input: 0.2.0 does not park).
        workers.start(old_tree, "old-w0", 4, hold=True)
        held, asking = _create(old_tree, url, prefix, "hold:3:a", "ask:2:b")

        async def full() -> bool:
            return (await m.inspect()).pending == 4

        await wait_until(full, what="the 0.2.0 worker holding four tasks")
        # Queued for their tenants behind it, by 0.2.0 creators; and one tenant's queue
        # fed by both revisions with different retentions, each way round: the
        # short-lived tasks' expiry must not take the long-lived ones along.
        queued_a, queued_b, queued_c = _create(
            old_tree, url, prefix, "run:15:a", "run:15:b", "run:5:c"
        )
        queued = queued_a + queued_b + queued_c
        short = [
            (await m.create_task(WHO, ORIGIN, payload=b"run", tenant=tenant,
                                 ttl=timedelta(seconds=1))).task_id
            for tenant in ("c", "d")
            for _ in range(5)
        ]  # fmt: skip
        queued += _create(old_tree, url, prefix, "run:5:d")[0]

        async def expired() -> bool:
            for task_id in short:
                if await m.find_task(TaskRequestContext(WHO, task_id)) is not None:
                    return False
            return True

        await wait_until(expired, what="the short-lived tasks expired")

        # The fleet rolls: this checkout's worker beside a second 0.2.0 one, both
        # claiming from the same partitions, while this checkout creates too.
        workers.start(ROOT, "new-w1", 8, hold=False)
        workers.start(old_tree, "old-w2", 2, hold=False)
        for tenant in ("a", "b", "e"):
            queued += [
                (await m.create_task(WHO, ORIGIN, payload=b"run", tenant=tenant)).task_id
                for _ in range(10)
            ]
        # The first 0.2.0 worker goes: what it holds is handed back and runs elsewhere.
        assert workers.stop("old-w0") == 0

        async def waiting_again() -> bool:
            for task_id in asking:
                task = await m.inspect_task(task_id)
                if task is None or task.status != "input_required" or task.lease_owner == "old-w0":
                    return False
            return True

        # Answered by this checkout once a worker of either revision asks again.
        await wait_until(waiting_again, what="the input rounds asked again")
        for task_id in asking:
            await m.update_task(TaskUpdateContext(WHO, task_id, {"q": ELICIT_ANSWER}))

        everything = held + asking + queued

        async def all_done() -> list[str] | None:
            statuses = []
            for task_id in everything:
                task = await m.find_task(TaskRequestContext(WHO, task_id))
                assert task is not None, "a task was lost"
                if task.status is not TaskStatus.COMPLETED or task.result is None:
                    return None
                statuses.append(task.result["content"][0]["text"])
            return statuses

        results = await wait_until(all_done, within=60, what="every task completed")
        # Every task ended once, completed; held tasks by a worker that outlived old-w0.
        assert all(not text.startswith("old-w0") for text in results[: len(held)])
        answered = results[len(held) : len(held + asking)]
        assert all('"name": "Luca"' in text for text in answered), answered
        seen = await m.inspect()
        assert seen.statuses.get("completed", 0) == len(everything)
        assert (seen.backlog, seen.pending, seen.tenants.queued) == (0, 0, 0)
        ran_by = {text.split()[0] for text in results}
        assert {"new-w1", "old-w2"} <= ran_by, ran_by

    assert workers.stop("new-w1") == 0
    assert workers.stop("old-w2") == 0
