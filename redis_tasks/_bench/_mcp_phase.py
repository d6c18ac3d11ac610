"""One measured phase of the ``mcp`` scenario: client processes share the load.

:func:`phase` starts the lean clients, hands each its job, starts them at once,
and pools their results with the CPU the servers, workers and Redis spent
meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import IO, Any, Final

from ._mcp_processes import START_TIMEOUT, Client, Stack
from ._probe import Probe
from ._progress import Progress

__all__ = ["phase"]

_PHASE_TIMEOUT: Final = 900.0  # seconds for one measured phase, at most


def _shares(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` near-equal whole shares (none below zero)."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


async def phase(
    stack: Stack,
    probe: Probe,
    log: IO[bytes],
    progress: Progress,
    label: str,
    job: dict[str, Any],
    callers: int,
    ops: int,
    processes: int,
) -> dict[str, Any]:
    """One measured phase: ``callers`` in ``processes`` client processes share ``ops``.

    Returns the clients' pooled results and where the CPU went meanwhile.
    """
    processes = max(1, min(processes, callers))
    clients: list[Client] = []
    try:
        offset = 0
        for i, (share, ops_share) in enumerate(
            zip(_shares(callers, processes), _shares(ops, processes), strict=True)
        ):
            client = await Client.start(
                [sys.executable, "-m", "redis_tasks._bench._mcp_client"],
                {}, log, f"mcp client {i}", pipes=True,
            )  # fmt: skip
            clients.append(client)
            await client.send(
                json.dumps({**job, "concurrency": share, "ops": ops_share, "offset": offset})
            )
            offset += share
        for client in clients:
            await client.expect("ready", START_TIMEOUT)
        stack.check()
        servers_before, workers_before = stack.cpu()
        redis_before = await probe.cpu_seconds()
        for client in clients:
            await client.send("go")
        waits = {asyncio.ensure_future(c.expect("result ", _PHASE_TIMEOUT)): c for c in clients}
        pending = set(waits)
        while pending:
            _, pending = await asyncio.wait(pending, timeout=0.1)
            progress.update(label, min(ops - 1, sum(c.done for c in clients)), ops)
        lines = [future.result() for future in waits]
        servers_after, workers_after = stack.cpu()
        redis_cpu = await probe.cpu_seconds() - redis_before
        progress.update(label, ops, ops)
    finally:
        await asyncio.gather(*(c.stop() for c in clients), return_exceptions=True)
    results = [json.loads(line.removeprefix("result ")) for line in lines]
    span = max(r["ended"] for r in results) - min(r["started"] for r in results)
    errors: dict[str, int] = {}
    for r in results:
        for kind, count in r["errors"].items():
            errors[kind] = errors.get(kind, 0) + count
    return {
        "span": max(span, 1e-6),
        "done": sum(r["done"] for r in results),
        "errors": errors,
        "lost": sum(r["lost"] for r in results),
        "polls": sum(r["polls"] for r in results),
        "latency_ms": [v for r in results for v in r["latency_ms"]],
        "create_ms": [v for r in results for v in r["create_ms"]],
        "completed": [v for r in results for v in r["completed"]],
        "cpu": {
            "servers": None
            if servers_before is None or servers_after is None
            else servers_after - servers_before,
            "workers": None
            if workers_before is None or workers_after is None
            else workers_after - workers_before,
            "redis": redis_cpu,
            "clients": sum(r["cpu"] for r in results),
        },
    }
