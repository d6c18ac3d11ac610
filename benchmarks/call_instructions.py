"""Redis instructions a script call costs beside the jobs it carries.

Usage: python -m benchmarks.call_instructions [--tasks N] [--batches 1,32]

Why: a drained job's Redis work is a part per job and a part per script call, the
call's shared by the jobs of its batch, so the work per job is J + C / b for calls of
b jobs; the drain's batches follow the machine's timing, so its figure mixes both.
Here both are counted apart, deterministically, on a fresh redis-server under
callgrind (``redis_tasks._bench._callgrind``):

- **per batch size**: N tasks are created (100 at a time) in one partition, then
  drained by ``claim_next`` calls of ``b`` tasks, each batch completed together (one
  ``finish_batch``, or ``finish`` for one), no worker involved; Redis instructions a
  job for each ``b`` given (two give J and C);
- **definitions**: each hot script cut before its body (its constants and helpers,
  which Redis builds again at every call) run against ``return {0}``: what one call
  spends on them alone, the part Redis Functions would build once per load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import redis.asyncio as aioredis

from redis_tasks._bench._adapter import ORIGIN, WHO
from redis_tasks._bench._args import counts
from redis_tasks._bench._callgrind import Callgrind
from redis_tasks._redis import scripts as lua
from redis_tasks._redis.manager import RedisTaskManager
from redis_tasks.testing import start_redis_server

_CREATE_AT_ONCE = 100
_DEFINITION_CALLS = 2_000
#: The scripts a drain and its creates run; each one's body opens with this line.
_HOT = ("claim_next", "finish_batch", "create")
_BODY = "local work_key = KEYS[1]"


@contextlib.asynccontextmanager
async def _counted_server() -> AsyncIterator[tuple[str, aioredis.Redis, Callgrind, int]]:
    """A fresh redis-server under callgrind, not counting yet: its URL, a client of it,
    the counter and the server's PID (which the counter switches)."""
    with tempfile.TemporaryDirectory(prefix="redis-tasks-call-instructions-") as scratch:
        counter = Callgrind(Path(scratch) / "callgrind")
        server = start_redis_server(
            Path(scratch) / "redis", binary=counter.wrapper(), startup_timeout=60
        )
        client = aioredis.Redis.from_url(server.url)
        try:
            pid = int((await client.info("server"))["process_id"])
            yield server.url, client, counter, pid
        finally:
            await client.aclose()
            server.stop()


async def per_job(tasks: int, batch: int) -> float:
    """Redis instructions a drained job with claims of ``batch`` tasks."""
    async with (
        _counted_server() as (url, _, counter, pid),
        RedisTaskManager.from_url(url, prefix="ci", partitions=1) as m,
    ):
        for start in range(0, tasks, _CREATE_AT_ONCE):
            n = min(_CREATE_AT_ONCE, tasks - start)
            await asyncio.gather(*(m.create_task(WHO, ORIGIN) for _ in range(n)))
        await counter.start([pid])
        done = 0
        while done < tasks:
            claimed = await m.work_queue.claim_next(
                0, consumer="c1", count=batch, lease=timedelta(minutes=1), max_attempts=3
            )
            await asyncio.gather(
                *(
                    m.complete_task(entry.task_id, {"ok": True}, fence=claim.fence)
                    for entry, claim in claimed
                    if entry.task_id is not None
                )
            )
            done += len(claimed)
        (count,) = await counter.take([pid])
    return count / tasks


async def definitions() -> dict[str, float]:
    """Redis instructions each hot script spends a call on its definitions alone."""
    async with _counted_server() as (_, client, counter, pid):

        async def per_call(source: str, keys: int) -> float:
            sha = await client.script_load(source)
            await counter.start([pid])
            for _ in range(0, _DEFINITION_CALLS, 200):
                pipe = client.pipeline(transaction=False)
                for _ in range(200):
                    pipe.evalsha(sha, keys, *(["{ci:0.1}:k"] * keys))
                await pipe.execute()
            (count,) = await counter.take([pid])
            return count / _DEFINITION_CALLS

        base = await per_call("return {0}", 0)
        found = {}
        for name in _HOT:
            script = lua.scripts[name]
            body = script.source.index(_BODY)
            cut = script.source[:body] + "do return {0} end\n"
            found[name] = await per_call(cut, len(script.spec.keys)) - base
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2_000, help="tasks drained per batch size")
    parser.add_argument("--batches", type=counts, default=[1, 32], help="claim sizes, e.g. 1,32")
    args = parser.parse_args()
    jobs = {batch: asyncio.run(per_job(args.tasks, batch)) for batch in args.batches}
    for batch, work in jobs.items():
        print(f"claims of {batch:>3}: {work:,.0f} Redis instructions a job")
    if len(jobs) >= 2:
        (small, at_small), (large, at_large) = sorted(jobs.items())[0], sorted(jobs.items())[-1]
        call = (at_small - at_large) / (1 / small - 1 / large)
        print(
            f"so about {at_large - call / large:,.0f} a job and {call:,.0f} a claim and its finish"
        )
    for name, work in asyncio.run(definitions()).items():
        print(f"{name}: its definitions {work:,.0f} instructions a call")


if __name__ == "__main__":
    main()
