"""Auto-pipelining: calls of one loop turn share a write; each keeps its own reply and error."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError

from redis_tasks._redis import pipeline as _pipeline
from redis_tasks._redis import wire as _wire
from redis_tasks._redis.pipeline import MAX_BATCH, MAX_IN_FLIGHT, AutoPipeline
from redis_tasks._redis.turn_batches import TurnBatches
from redis_tasks._redis.wire import pack
from redis_tasks.testing import RedisServer


class CountingPool(BlockingConnectionPool):
    """Counts connection checkouts: one per pipeline write."""

    checkouts = 0

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        self.checkouts += 1
        return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[Redis]:
    pool = CountingPool.from_url(redis_server.url, max_connections=8)
    redis = Redis.from_pool(pool)
    yield redis
    await redis.aclose()


def test_pack_writes_resp_for_our_three_argument_types() -> None:
    packed = pack([("SET", b"k\x00", 5), ("GET", "ключ")])
    key = "ключ".encode()
    assert packed == (
        b"*3\r\n$3\r\nSET\r\n$2\r\nk\x00\r\n$1\r\n5\r\n"
        b"*2\r\n$3\r\nGET\r\n$" + str(len(key)).encode() + b"\r\n" + key + b"\r\n"
    )
    for bad in (1.5, None, True, bytearray(b"x")):
        with pytest.raises(TypeError):
            pack([("SET", "k", bad)])


async def test_calls_of_one_turn_share_one_write_and_get_their_own_replies(
    client: Redis, prefix: str
) -> None:
    pipeline = AutoPipeline(client.connection_pool, timeout=5)
    replies = await asyncio.gather(
        *(pipeline.call(("ECHO", f"{prefix}-{i}")) for i in range(MAX_BATCH))
    )
    assert replies == [f"{prefix}-{i}".encode() for i in range(MAX_BATCH)]
    pool = client.connection_pool
    assert isinstance(pool, CountingPool)
    assert pool.checkouts == 1
    # A turn larger than a batch is split: the kept connection and one more.
    await asyncio.gather(*(pipeline.call(("PING",)) for _ in range(MAX_BATCH + 1)))
    assert pool.checkouts == 2
    # Both are kept: the next turns check nothing out of the pool.
    for _ in range(3):
        await asyncio.gather(*(pipeline.call(("PING",)) for _ in range(MAX_BATCH + 1)))
    assert pool.checkouts == 2
    await pipeline.aclose()


async def test_a_kept_connection_the_server_closed_is_replaced_not_used(
    client: Redis, redis_server: RedisServer, prefix: str
) -> None:
    pipeline = AutoPipeline(client.connection_pool, timeout=5)
    name = f"{prefix}-kept"
    assert await pipeline.call(("CLIENT", "SETNAME", name)) == b"OK"
    killer = Redis.from_url(redis_server.url)
    try:
        (kept,) = [c for c in await killer.client_list() if c["name"] == name]
        assert await killer.client_kill_filter(_id=kept["id"]) == 1
    finally:
        await killer.aclose()
    # The next batch finds the kept connection at EOF and takes a sound one, or (if
    # the close has not arrived yet) fails like any broken connection; either way
    # the dead connection is dropped, never used again.
    try:
        first: Any = await pipeline.call(("ECHO", "after"))
    except RedisConnectionError as exc:
        first = exc
    assert first == b"after" or isinstance(first, RedisConnectionError)
    assert await pipeline.call(("ECHO", "again")) == b"again"
    await pipeline.aclose()


async def test_an_error_reply_fails_only_its_own_call(client: Redis, prefix: str) -> None:
    pipeline = AutoPipeline(client.connection_pool, timeout=5)
    results = await asyncio.gather(
        pipeline.call(("SET", f"{prefix}:a", "1")),
        pipeline.call(("EVALSHA", "0" * 40, 0)),
        pipeline.call(("GET", f"{prefix}:a")),
        return_exceptions=True,
    )
    assert results[0] == b"OK"  # raw replies: no redis-py response callbacks
    assert isinstance(results[1], NoScriptError)
    assert results[2] == b"1"
    await client.delete(f"{prefix}:a")


async def test_a_broken_connection_fails_every_call_without_a_reply(
    client: Redis, prefix: str
) -> None:
    pipeline = AutoPipeline(client.connection_pool, timeout=5)
    # QUIT is answered, then the server closes the connection under the rest.
    results = await asyncio.gather(
        pipeline.call(("QUIT",)),
        pipeline.call(("ECHO", prefix)),
        pipeline.call(("PING",)),
        return_exceptions=True,
    )
    assert results[0] == b"OK"
    assert all(isinstance(r, RedisConnectionError) for r in results[1:]), results
    # The pool is usable again: the broken connection was dropped, not reused.
    assert await pipeline.call(("ECHO", "again")) == b"again"


async def test_a_hung_server_fails_the_batch_within_the_timeout(
    client: Redis, redis_server: RedisServer
) -> None:
    pipeline = AutoPipeline(client.connection_pool, timeout=0.3)
    pauser = Redis.from_url(redis_server.url)
    await pauser.client_pause(1500, all=True)
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        results = await asyncio.gather(
            pipeline.call(("PING",)), pipeline.call(("PING",)), return_exceptions=True
        )
        assert all(isinstance(r, TimeoutError) for r in results), results
        assert loop.time() - started < 1.2
    finally:
        await pauser.client_unpause()
        await pauser.aclose()


async def test_a_call_cancelled_before_its_turn_ends_is_never_sent(
    client: Redis, prefix: str
) -> None:
    pipeline = AutoPipeline(client.connection_pool, timeout=5)
    withdrawn = pipeline.call(("SET", f"{prefix}:w", "1"))
    withdrawn.cancel()
    assert await pipeline.call(("EXISTS", f"{prefix}:w")) == 0


async def test_calls_made_while_two_batches_are_out_go_in_the_next_write(
    client: Redis, redis_server: RedisServer, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[int] = []
    real_write = _wire.write

    async def counting(connection: Any, data: bytes) -> None:
        writes.append(data.count(b"ECHO"))
        await real_write(connection, data)

    monkeypatch.setattr(_pipeline, "write", counting)
    pipeline = AutoPipeline(client.connection_pool, timeout=5)
    pauser = Redis.from_url(redis_server.url)
    await pauser.client_pause(300, all=True)  # the first batches stay out meanwhile
    try:
        first = [pipeline.call(("ECHO", f"{prefix}-a{i}")) for i in range(3)]
        await asyncio.sleep(0)  # end of turn: the first batch goes out
        second = [pipeline.call(("ECHO", f"{prefix}-b{i}")) for i in range(3)]
        await asyncio.sleep(0)
        third = [pipeline.call(("ECHO", f"{prefix}-c{i}")) for i in range(3)]
        await asyncio.sleep(0)
        fourth = [pipeline.call(("ECHO", f"{prefix}-d{i}")) for i in range(3)]
        replies = await asyncio.gather(*first, *second, *third, *fourth)
    finally:
        await pauser.aclose()
    assert replies == [f"{prefix}-{turn}{i}".encode() for turn in "abcd" for i in range(3)]
    assert MAX_IN_FLIGHT == 2
    assert writes == [3, 3, 6]  # turns three and four waited, then went out together
    await pipeline.aclose()


async def test_turn_batches_gather_per_partition_and_answer_each_call() -> None:
    """TurnBatches (a worker's finishes, a manager's creates): one send per partition
    and turn, at most ``limit`` items each, a lone item sent alone; each caller gets its
    own result or its own error, a send that fails fails its callers alone, and a
    caller cancelled before the send withdraws its item."""
    sent: list[tuple[str, int | None, list[str]]] = []

    async def one(item: str) -> int:
        sent.append(("one", None, [item]))
        if item.startswith("bad"):
            raise ValueError(item)
        return len(item)

    async def many(partition: int, items: list[str]) -> list[int | BaseException]:
        sent.append(("many", partition, items))
        if partition == 3:
            raise RedisConnectionError("lost")
        return [KeyError(i) if i.startswith("bad") else 10 + len(i) for i in items]

    batches: TurnBatches[str, int] = TurnBatches(one, many, limit=3)
    calls = {
        "a1": (1, "a1"), "a2": (1, "bad-a2"), "a3": (1, "a3"), "a4": (1, "a4"),
        "b": (2, "bad-b"), "c1": (3, "c1"), "c2": (3, "c2"), "gone": (1, "gone"),
    }  # fmt: skip
    tasks = {name: asyncio.ensure_future(batches.submit(*call)) for name, call in calls.items()}
    await asyncio.sleep(0)  # every submit has queued its item
    tasks["gone"].cancel()
    replies = await asyncio.gather(*tasks.values(), return_exceptions=True)
    answers = dict(zip(tasks, replies, strict=True))
    assert sorted(sent, key=str) == sorted(
        [
            ("many", 1, ["a1", "bad-a2", "a3"]),
            ("one", None, ["a4"]),
            ("one", None, ["bad-b"]),
            ("many", 3, ["c1", "c2"]),
        ],
        key=str,
    )
    # Each its own result: a batch's (10 + its length) or a lone call's (its length).
    assert [answers[name] for name in ("a1", "a3", "a4")] == [12, 12, 2]
    assert isinstance(answers["a2"], KeyError)
    assert isinstance(answers["b"], ValueError)
    assert isinstance(answers["c1"], RedisConnectionError)
    assert isinstance(answers["c2"], RedisConnectionError)
    assert isinstance(answers["gone"], asyncio.CancelledError)
