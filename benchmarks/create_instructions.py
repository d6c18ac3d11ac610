"""Redis instructions per ``create_task``: this checkout against earlier revisions.

Usage: python -m benchmarks.create_instructions [--rev REV ...] [--creates N] [--runs R]
       [--at-once K]

Why: a create is one script call, so what Redis runs for it does not depend on
batching or timing, and callgrind counts it the same whatever else the machine
does (two runs agree within half a percent). Each revision gets a fresh
redis-server under callgrind (``redis_tasks._bench._callgrind``); 50 creates warm
it up, then N creates, K at a time (100; creates made together go as one script call
a partition, so K = 1 counts a lone create's), are counted. An earlier revision runs from
a temporary git worktree, in a process of its own. Needs valgrind, git and a
source checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_WARM = 50


def _callgrind_module() -> Any:
    """This checkout's ``_callgrind`` (it imports nothing of the package), whichever
    revision's package is measured: older ones lack it."""
    path = ROOT / "redis_tasks" / "_bench" / "_callgrind.py"
    spec = importlib.util.spec_from_file_location("_callgrind_of_this_checkout", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def measure(creates: int, at_once: int = 100) -> float:
    """Redis instructions per create of the ``redis_tasks`` this process imports."""
    import redis.asyncio as aioredis

    from redis_tasks._bench._adapter import ORIGIN, WHO
    from redis_tasks._redis.manager import RedisTaskManager
    from redis_tasks.testing import start_redis_server

    with tempfile.TemporaryDirectory(prefix="redis-tasks-create-instructions-") as scratch:
        counter = _callgrind_module().Callgrind(Path(scratch) / "callgrind")
        server = start_redis_server(
            Path(scratch) / "redis", binary=counter.wrapper(), startup_timeout=60
        )
        client = aioredis.Redis.from_url(server.url)
        try:
            pid = int((await client.info("server"))["process_id"])
            async with RedisTaskManager.from_url(server.url, prefix="ci") as manager:
                for _ in range(_WARM):
                    await manager.create_task(WHO, ORIGIN)
                await counter.start([pid])
                for start in range(0, creates, at_once):
                    batch = min(at_once, creates - start)
                    await asyncio.gather(*(manager.create_task(WHO, ORIGIN) for _ in range(batch)))
                (count,) = await counter.take([pid])
        finally:
            await client.aclose()
            server.stop()
    return float(count) / creates


def _at(rev: str, creates: int, at_once: int) -> float:
    """Instructions per create of revision ``rev``, from a worktree, in a child process."""
    with tempfile.TemporaryDirectory(prefix="redis-tasks-rev-") as scratch:
        tree = Path(scratch) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev],
            check=True,
            capture_output=True,
        )
        try:
            # This file runs from the tree's root with the tree first on the path, so
            # the revision's package is the one measured (the harness is this file).
            done = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--this-only",
                 "--at-once", str(at_once), "--creates", str(creates)],
                cwd=tree,
                env={**os.environ, "PYTHONPATH": str(tree)},
                check=True,
                capture_output=True,
                text=True,
            )  # fmt: skip
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                check=False,
                capture_output=True,
            )
    return float(json.loads(done.stdout.splitlines()[-1])["per_create"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", action="append", default=[], help="an earlier revision")
    parser.add_argument("--creates", type=int, default=2_000, help="creates counted per run")
    parser.add_argument("--runs", type=int, default=2, help="runs of each revision, alternating")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--at-once", type=int, default=100, help="creates made together")
    parser.add_argument("--this-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.this_only:
        print(json.dumps({"per_create": asyncio.run(measure(args.creates, args.at_once))}))
        return
    found: dict[str, list[float]] = {"this checkout": []}
    for rev in args.rev:
        found[rev] = []
    for run in range(args.runs):
        found["this checkout"].append(asyncio.run(measure(args.creates, args.at_once)))
        for rev in args.rev:
            found[rev].append(_at(rev, args.creates, args.at_once))
        print(f"run {run + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in found.items()))
    medians = {name: statistics.median(counts) for name, counts in found.items()}
    for name, median in medians.items():
        ratio = median / medians["this checkout"]
        print(f"{name:>16}: {median:,.0f} instructions per create ({ratio:.3f}x ours)")
    if args.json is not None:
        results = {
            "creates": args.creates,
            "at_once": args.at_once,
            "runs": found,
            "medians": medians,
        }
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
