"""The embedded default: an in-process Redis (fakeredis with Lua) when no URL is given."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

__all__ = ["embedded_client", "embedded_server"]


def embedded_server() -> Any:
    """A fresh in-process Redis server; clients made from it share its data."""
    try:
        import fakeredis
    except ImportError:  # pragma: no cover - depends on the installed extras
        raise RuntimeError(
            "the embedded Redis needs the 'embedded' extra: pip install 'redis-tasks[embedded]'"
        ) from None
    return fakeredis.FakeServer()


def embedded_client(server: Any) -> Redis:
    """An asyncio client of ``server`` (from :func:`embedded_server`)."""
    import fakeredis

    client: Redis = fakeredis.aioredis.FakeRedis(server=server)
    return client
