"""Task events on a cluster: hints pushed on shard channels, the streams as the record.

Every hint arrives once, whether it came as a push, from a read of the stream, or
both; a writer that does not publish is still heard (from the streams); a slot
that moves and a primary that fails are followed; and a user the ACL refuses the
shard channels still gets every event, from per-partition reads.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import shlex
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis

from redis_tasks import RedisTaskManager, TaskRequestContext
from redis_tasks._redis.shard_tail import ShardTail, _Stream, stream_id
from redis_tasks.testing import RedisCluster, wait_failover
from tests.support.backends import README
from tests.support.helpers import (
    ALICE,
    ORIGIN,
    EventLog,
    count_finish_batches,
    told_once_with_traceback,
    wait_until,
)

from .test_cluster import SlotMove


def shard_tail(manager: RedisTaskManager) -> ShardTail:
    tail = manager.event_publisher.shard_tail  # type: ignore[attr-defined]
    assert isinstance(tail, ShardTail)
    return tail


async def caught_up(tail: ShardTail, times: int) -> None:
    """Wait until the tail has read the streams ``times`` more times."""
    target = tail.catch_ups + times * 3  # one per primary

    async def done() -> bool:
        return tail.catch_ups >= target

    await wait_until(done, within=15, what="catch-up reads of the streams")


def test_stream_ids_order_like_the_stream() -> None:
    assert stream_id(b"1700000000000-3") == (1700000000000, 3)
    assert stream_id(b"9-10") > stream_id(b"9-9") > stream_id(b"8-99")
    assert stream_id(b"0-0") < stream_id(b"1-0")


def entry(n: int, task: str) -> tuple[bytes, list[bytes]]:
    return f"{n}-0".encode(), [b"t", task.encode()]


def test_a_stream_is_settled_by_its_counter_when_pushes_account_for_every_entry() -> None:
    stream = _Stream("s", b"10-0", added=5)
    assert stream.pushed_hint(b"11-0")
    assert not stream.pushed_hint(b"11-0")  # a duplicate
    assert not stream.pushed_hint(b"9-0")  # already accounted for
    assert stream.pushed_hint(b"12-0")
    # The counter says two entries were added up to 12-0: both were pushed.
    assert stream.settle(7, b"12-0")
    assert (stream.position, stream.added, stream.pushed) == (b"12-0", 7, [])
    # Three added, two pushed so far (one in flight, or a writer that does not publish).
    assert stream.pushed_hint(b"13-0")
    assert stream.pushed_hint(b"15-0")
    assert not stream.settle(10, b"15-0")
    assert stream.position == b"12-0"  # nothing moved
    delivered: list[str] = []
    stream.read(
        [entry(13, "a"), entry(14, "b"), entry(15, "c"), entry(16, "d")],
        (10, b"15-0"),
        delivered.append,
        complete=True,
    )
    assert delivered == ["b", "d"]  # 13 and 15 came as pushes; 16 was added meanwhile
    assert (stream.position, stream.added) == (b"16-0", 11)
    assert not stream.pushed_hint(b"16-0")  # read already: its push is dropped


def test_a_read_cut_short_leaves_the_count_unknown_until_the_end() -> None:
    stream = _Stream("s", b"0-0", added=0)
    delivered: list[str] = []
    stream.read([entry(1, "a"), entry(2, "b")], (3, b"3-0"), delivered.append, complete=False)
    assert (stream.position, stream.added) == (b"2-0", -1)
    assert not stream.settle(3, b"3-0")  # unknown count: must read on
    stream.read([entry(3, "c")], (3, b"3-0"), delivered.append, complete=True)
    assert delivered == ["a", "b", "c"]
    assert (stream.position, stream.added) == (b"3-0", 3)
    assert stream.settle(3, b"3-0")


@asynccontextmanager
async def writer_and_reader(
    url: str, prefix: str, **writer_options: Any
) -> AsyncIterator[tuple[RedisTaskManager, RedisTaskManager]]:
    """Two managers of one prefix: one writes, the other listens."""
    async with (
        RedisTaskManager.from_url(url, prefix=prefix, **writer_options) as writer,
        RedisTaskManager.from_url(url, prefix=prefix) as reader,
    ):
        yield writer, reader


async def test_every_hint_arrives_once_over_pushes_and_stream_reads(
    redis_cluster: RedisCluster, prefix: str
) -> None:
    async with writer_and_reader(redis_cluster.url, prefix) as (writer, reader):
        log = EventLog()
        with reader.event_publisher.subscribe(log):
            await reader.event_publisher.wait_ready()
            tail = shard_tail(reader)
            tasks = await asyncio.gather(*(writer.create_task(ALICE, ORIGIN) for _ in range(400)))
            # Half unfenced (finish.lua, a message each), half fenced together: one
            # finish_batch call per partition, whose hints go out as one message.
            batched = count_finish_batches(writer)
            await asyncio.gather(
                *(
                    writer.complete_task(t.task_id, {"ok": 1}, fence=0 if i % 2 else None)
                    for i, t in enumerate(tasks)
                )
            )
            assert batched is not None
            assert max(batched) >= 2, batched
            for task in tasks:
                await log.wait_for(task.task_id, 2)
            reads = tail.reads
            await caught_up(tail, 2)  # the streams were accounted for after every push
            # Every writer publishes: the counters match the pushes, nothing is read.
            assert tail.reads == reads
            counts = Counter(log.ids)
            assert {counts[t.task_id] for t in tasks} == {2}  # created, completed: once each
            assert len({int(t.task_id.split(".")[0]) for t in tasks}) == 16


async def test_a_writer_that_does_not_publish_is_heard_from_the_streams(
    redis_cluster: RedisCluster, prefix: str
) -> None:
    async with writer_and_reader(redis_cluster.url, prefix) as (writer, reader):
        assert writer._events.endswith("p")
        writer._events = writer._events.removesuffix("p")  # as an older version writes
        log = EventLog()
        with reader.event_publisher.subscribe(log):
            await reader.event_publisher.wait_ready()
            reads = shard_tail(reader).reads
            silent = [await writer.create_task(ALICE, ORIGIN) for _ in range(20)]
            for task in silent:
                await log.wait_for(task.task_id, 1)  # within a catch-up interval
            assert all(log.count(t.task_id) == 1 for t in silent)
            assert shard_tail(reader).reads > reads  # found by reading the streams


async def test_a_bug_in_the_shard_tail_is_told_once_and_not_retried(
    redis_cluster: RedisCluster,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only Redis failing is retried: a bug (a planted TypeError) stops the tail, logged
    once with its traceback, and the manager goes on."""
    asked = 0

    async def planted_counters(*args: Any) -> Any:
        nonlocal asked
        asked += 1
        raise TypeError("planted")

    monkeypatch.setattr(ShardTail, "_counters", planted_counters)
    async with RedisTaskManager.from_url(redis_cluster.url, prefix=prefix) as manager:
        with (
            caplog.at_level(logging.WARNING, logger="redis_tasks.events"),
            manager.event_publisher.subscribe(lambda task_id: None),
        ):
            await asyncio.wait_for(manager.event_publisher.wait_ready(), 5)
            await asyncio.sleep(0.5)  # a retry (after 50 ms, then 100...) would have come
            task = await manager.create_task(ALICE, ORIGIN)
            assert await manager.find_task(TaskRequestContext(ALICE, task.task_id)) == task
    assert asked == 1
    told_once_with_traceback(caplog.records, "redis_tasks.events", "planted_counters")


@pytest.mark.slow
async def test_hints_follow_a_slot_that_moves_and_a_primary_that_fails(
    private_cluster: RedisCluster, prefix: str
) -> None:
    seed = private_cluster.primaries[0]
    move = SlotMove.of(private_cluster, prefix)
    async with writer_and_reader(seed.url, prefix, partitions=1) as (writer, reader):
        log = EventLog()
        with reader.event_publisher.subscribe(log):
            await reader.event_publisher.wait_ready()
            tail = shard_tail(reader)
            subscribed = tail.subscriptions
            before = await writer.create_task(ALICE, ORIGIN)
            await log.wait_for(before.task_id, 1)
            await asyncio.to_thread(move.run)
            assert move.moved()
            moved = [await writer.create_task(ALICE, ORIGIN) for _ in range(10)]
            for task in moved:
                await log.wait_for(task.task_id, 1)

            async def resubscribed() -> bool:
                return tail.subscriptions > subscribed

            await wait_until(resubscribed, what="subscriptions on the slot's new primary")
            # The slot's new primary fails: its replica takes over, the hints follow.
            victim = move.target
            victim.process.kill()
            await asyncio.to_thread(wait_failover, private_cluster, victim)
            after = [await writer.create_task(ALICE, ORIGIN) for _ in range(10)]
            for task in after:
                await log.wait_for(task.task_id, 1, within=30)
            assert all(log.count(t.task_id) == 1 for t in [before, *moved, *after])


def _acl_line(prefix: str, *, shard_channels: bool) -> tuple[str, list[str]]:
    """The README's ACL line for ``prefix`` (without the shard-channel rights if told)."""
    (line,) = re.findall(r"^ACL SETUSER .*$", README.read_text(), re.M)
    user, password = f"app-{prefix}", secrets.token_hex(16)
    words = shlex.split(line.replace("rt-app", user).replace(">CHANGE-ME", f">{password}"))
    words = [w.replace("{rt:*", f"{{{prefix}:*") for w in words]
    if not shard_channels:
        words = [w for w in words if w not in ("+spublish", "+ssubscribe") and w[0] != "&"]
    return f"redis://{user}:{password}@", words


@pytest.mark.parametrize("shard_channels", [True, False])
async def test_events_reach_a_restricted_user_with_or_without_shard_channels(
    redis_cluster: RedisCluster, prefix: str, shard_channels: bool, caplog: pytest.LogCaptureFixture
) -> None:
    credentials, command = _acl_line(prefix, shard_channels=shard_channels)
    user = command[2]
    admins = [redis.Redis.from_url(node.url) for node in redis_cluster.servers]
    try:
        for admin in admins:  # a cluster's ACLs are per node
            admin.execute_command(*command)  # type: ignore[no-untyped-call]
            admin.acl_log_reset()
        url = redis_cluster.url.replace("redis://", credentials)
        async with writer_and_reader(url, prefix) as (writer, reader):
            assert writer._events.endswith("p") is shard_channels
            log = EventLog()
            with reader.event_publisher.subscribe(log):
                await reader.event_publisher.wait_ready()
                task = await writer.create_task(ALICE, ORIGIN)
                await writer.complete_task(task.task_id, {"ok": 1})
                await log.wait_for(task.task_id, 2)
                found = await reader.find_task(TaskRequestContext(ALICE, task.task_id))
                assert found is not None
            assert (reader.event_publisher.shard_tail is not None) is shard_channels  # type: ignore[attr-defined]
        denied = [e for admin in admins for e in admin.acl_log() if e.get("username") == user]
        if shard_channels:
            assert denied == [], denied
        else:  # the one probe of each kind per manager, then the streams are read
            assert {e["object"] for e in denied} <= {"spublish", "ssubscribe"}
            warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
            assert any("SPUBLISH refused" in w for w in warnings)
    finally:
        for admin in admins:
            admin.acl_deluser(user)
            admin.close()
