"""One client process of the ``lifecycle`` scenario: create tasks, poll each to terminal.

Run as ``python -m redis_tasks._bench._lifecycle_client URL QUEUE``. The harness
starts several, so that the figure measures the library and not one Python
process: a single client process was CPU-bound first (1,158 tasks/s with one
worker, falling as workers took its cores). Line protocol on stdin/stdout:
the process prints ``ready`` once connected and its event tail is in place,
then reads ``run N C`` (N tasks over C concurrent clients) and prints
``result <json>``: every task's create-to-terminal time (ms), this process's CPU
seconds for the run, and the wall-clock start and end (unix time).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sys
import time
from typing import Any

from redis_tasks._loop import run
from redis_tasks._models import TaskRequestContext
from redis_tasks._redis.manager import RedisTaskManager

from ._adapter import ORIGIN, WHO

__all__ = ["run_clients"]

# A missed event is allowed (hints are best effort): re-poll after this long.
_REPOLL = 0.05


async def run_clients(manager: RedisTaskManager, count: int, clients: int) -> list[float]:
    """Create ``count`` tasks from ``clients`` coroutines, each polled until terminal
    (woken by the event publisher); the create-to-terminal times in ms."""
    changed: dict[str, asyncio.Event] = {}

    def on_change(task_id: str) -> None:
        event = changed.get(task_id)
        if event is not None:
            event.set()

    numbers = itertools.count()
    samples: list[float] = []

    async def client() -> None:
        while next(numbers) < count:
            began = time.perf_counter()
            task = await manager.create_task(WHO, ORIGIN)
            event = changed[task.task_id] = asyncio.Event()
            ctx = TaskRequestContext(WHO, task.task_id)
            while True:
                event.clear()
                found = await manager.find_task(ctx)
                if found is None:
                    raise RuntimeError("a benchmark task vanished")
                if found.is_terminal:
                    break
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_REPOLL):
                        await event.wait()
            del changed[task.task_id]
            samples.append((time.perf_counter() - began) * 1000)

    with manager.event_publisher.subscribe(on_change):
        await manager.event_publisher.wait_ready()
        await asyncio.gather(*(client() for _ in range(clients)))
    return samples


async def _serve(url: str, queue: str) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with RedisTaskManager.from_url(url, prefix=queue) as manager:
        # Connect and start the event tail before the clock starts.
        with manager.event_publisher.subscribe(lambda _: None):
            await manager.event_publisher.wait_ready()
        print("ready", flush=True)
        while line := (await reader.readline()).decode().strip():
            command, *args = line.split()
            if command != "run" or len(args) != 2:
                print(f"error unknown command {command!r}", flush=True)
                continue
            cpu, started = time.process_time(), time.time()
            samples = await run_clients(manager, int(args[0]), int(args[1]))
            result: dict[str, Any] = {
                "samples_ms": [round(s, 3) for s in samples],
                "cpu": time.process_time() - cpu,
                "started": started,
                "ended": time.time(),
            }
            print("result " + json.dumps(result), flush=True)


def main(argv: list[str]) -> None:
    """``URL QUEUE``: serve the line protocol above until stdin closes."""
    url, queue = argv
    try:
        run(_serve(url, queue))
    except Exception as exc:  # the harness reads this line, not a traceback
        print(f"error {type(exc).__name__}", flush=True)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main(sys.argv[1:])
