"""One connection to one node for one question, as ``check`` asks them: connected within
the call timeout, used, and closed, whatever happens."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.asyncio.connection import AbstractConnection

from redis_tasks._redis.client import ConnectionSettings

__all__ = ["connect_to", "get_anywhere", "on_connection"]

T = TypeVar("T")


def connect_to(settings: ConnectionSettings, node: str) -> Callable[[], AbstractConnection]:
    """A maker of connections to ``node`` (``host:port``) with ``settings``."""
    host, _, port = node.rpartition(":")
    return lambda: settings.single(host, int(port))


async def on_connection(
    connection: AbstractConnection,
    seconds: float,
    use: Callable[[AbstractConnection], Awaitable[T]],
) -> T:
    """``use(connection)`` once it is connected (within ``seconds``); then disconnect."""
    try:
        async with asyncio.timeout(seconds):
            await connection.connect()  # type: ignore[no-untyped-call]
        return await use(connection)
    finally:
        await connection.disconnect()


async def get_anywhere(settings: ConnectionSettings, primaries: list[str], key: str) -> object:
    """``GET key`` asked of every primary: the one serving its slot answers (the others
    redirect); ``None`` when none holds it."""

    async def read(connection: AbstractConnection) -> object:
        async with asyncio.timeout(settings.timeout):
            await connection.send_command("GET", key)
            return await connection.read_response()

    outcomes = await asyncio.gather(
        *(on_connection(connect_to(settings, n)(), settings.timeout, read) for n in primaries),
        return_exceptions=True,
    )
    return next((o for o in outcomes if isinstance(o, bytes)), None)
