"""Helpers shared by the peer adapters: batching, stopping a worker loop, deleting keys."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable, Iterator
from typing import Any

from redis.asyncio import Redis

__all__ = ["BATCH", "batches", "glob_escape", "run_until_cancelled", "unlink_matching"]

#: How many enqueue calls an adapter keeps in flight at once (``asyncio.gather`` chunk).
BATCH = 500

_CLIENTS: dict[str, Redis] = {}


def batches(count: int, size: int = BATCH) -> Iterator[int]:
    """Split ``count`` into chunk sizes of at most ``size``."""
    while count > 0:
        step = min(size, count)
        yield step
        count -= step


def glob_escape(text: str) -> str:
    """Escape ``text`` for use inside a Redis SCAN MATCH pattern."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def _client(url: str) -> Redis:
    """One plain redis-py client per URL for this process."""
    client = _CLIENTS.get(url)
    if client is None:
        client = _CLIENTS[url] = Redis.from_url(url)
    return client


async def unlink_matching(url: str, patterns: Iterable[str]) -> int:
    """SCAN for every key matching one of ``patterns`` (glob) and UNLINK them; return the count."""
    client = _client(url)
    removed = 0
    for pattern in patterns:
        batch: list[bytes] = []
        async for key in client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                removed += await client.unlink(*batch)
                batch.clear()
        if batch:
            removed += await client.unlink(*batch)
    return removed


async def run_until_cancelled(coro: Coroutine[Any, Any, object]) -> None:
    """Run a library's worker loop in a task of its own; stop it when this one is cancelled.

    redis-py 8 (8.0.1 and 8.1.0 both; 7.4.1 does not) now and then swallows a task's
    cancellation when it lands inside a command, so one ``cancel()`` may leave a worker loop
    running; and some libraries (SAQ) return quietly on cancellation. This cancels the loop
    until it has really finished, then re-raises CancelledError so that the harness sees a
    worker it stopped rather than one that stopped by itself. If the loop ends on its own,
    its exception (or normal return) passes through.
    """
    task = asyncio.ensure_future(coro)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=0.2)
        raise
