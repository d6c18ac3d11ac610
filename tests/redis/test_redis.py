"""The Redis backend itself: scripts, round trips, key layout, failures."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError

from redis_tasks import (
    BackendError,
    ClaimOutcome,
    InternalError,
    QuotaExceededError,
    RedisTaskManager,
    TaskNotFoundError,
    TaskRequestContext,
    TaskStatus,
    TaskUpdateContext,
)
from redis_tasks._limits import Limits
from redis_tasks._models import RequestContext
from redis_tasks._origin import TaskOrigin
from redis_tasks._redis import events as redis_events
from redis_tasks._redis.keys import DIRECT_ENTRY, WORK_GROUP, KeySpace
from redis_tasks._redis.lua_header import LEADING_TASK_KEYS
from redis_tasks._redis.lua_source import check_header, lua_dir
from redis_tasks._redis.pipeline import AutoPipeline
from redis_tasks._redis.scripts import SPECS, scripts
from redis_tasks._stats import CREATED_FIELD, REFUSED_FIELDS
from redis_tasks._work_queue import WorkEntry
from redis_tasks.testing import RedisServer, start_redis_server
from tests.support.backends import Backend
from tests.support.helpers import (
    ALICE,
    BOB,
    ELICIT,
    ELICIT_ANSWER,
    ORIGIN,
    OTHER_ENDPOINT,
    EventLog,
    told_once_with_traceback,
    wait_until,
)


async def command_counts(client: Redis) -> Counter[str]:
    stats = await client.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


async def commands_of(client: Redis, action: Any) -> Counter[str]:
    """The Redis commands (top level and inside scripts) one awaited ``action`` ran."""
    before = await command_counts(client)
    await action()
    after = await command_counts(client)
    delta = after - before
    delta["info"] -= 1  # our own INFO call
    return +delta


def test_every_script_has_a_header_matching_its_python_contract() -> None:
    for name, spec in SPECS.items():
        source = (lua_dir() / f"{name}.lua").read_text()
        check_header(name, source, spec)  # raises on disagreement
        assert scripts[name].sha
        assert "RC_OK" in scripts[name].source
        # Every KEYS and ARGV slot is bound to a named local, or is one of the first
        # eight that leading_task_keys() reads by name (the loader checks their order).
        leading = len(LEADING_TASK_KEYS) if "leading_task_keys()" in source else 0
        for n in range(leading + 1, len(spec.keys) + 1):
            assert f"= KEYS[{n}]" in source, (name, n)
        for n in range(1, len(spec.argv) + 1):
            assert f"ARGV[{n}]" in source, (name, n)


def test_a_header_that_disagrees_with_its_contract_is_refused() -> None:
    spec = SPECS["take_answers"]
    source = (lua_dir() / "take_answers.lua").read_text()
    for broken in (
        source.replace("2 answers", "2 answerz"),
        source.replace("1 fence", "1 fence\n    2 extra"),
        source.replace("--[[", "--[ [", 1),
    ):
        with pytest.raises(InternalError):
            check_header("take_answers", broken, spec)


async def test_each_operation_is_one_evalsha_round_trip(standalone_backend: Backend) -> None:
    m = standalone_backend.manager
    client = standalone_backend.client
    assert isinstance(client, Redis)
    task = await m.create_task(ALICE, ORIGIN)
    tid = task.task_id
    # Held, as a running task is: the cancellation below records intent only.
    ((entry, _),) = await m.work_queue.claim_next(
        int(tid.split(".")[0]), consumer="w1", count=1, lease=timedelta(minutes=1), max_attempts=3
    )
    assert entry.task_id == tid
    actions = {
        "create": lambda: m.create_task(ALICE, ORIGIN),
        "find": lambda: m.find_task(TaskRequestContext(ALICE, tid)),
        "request_input": lambda: m.request_input(tid, {"k": ELICIT}),
        "update": lambda: m.update_task(TaskUpdateContext(ALICE, tid, {"k": ELICIT_ANSWER})),
        "take": lambda: m.take_input_responses(tid),
        "cancel_intent": lambda: m.request_cancellation(TaskRequestContext(ALICE, tid)),
        "is_cancel": lambda: m.is_cancellation_requested(tid),
        "complete": lambda: m.complete_task(tid, {"ok": True}),
    }
    for name, action in actions.items():
        ran = await commands_of(client, action)
        top_level = {c: n for c, n in ran.items() if c in ("evalsha", "eval", "script|load")}
        assert top_level == {"evalsha": 1}, (name, ran)


async def test_creates_of_one_turn_are_one_call_a_partition_each_answered_as_if_alone(
    redis_server: RedisServer, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creates made together (one event-loop turn) go as ``create`` calls, one a
    partition (at most CREATE_BATCH creates each), and each is admitted and answered
    exactly as it would be alone: a tenant's quota admits exactly its number whichever
    batch a create rode in, each refused create raises its own error and stores
    nothing, the stats count each create once, and every created task's event
    arrives (one event entry names a batch's tasks); a batch sent again after its
    reply was lost creates nothing twice."""
    quota = 30
    async with RedisTaskManager.from_url(
        redis_server.url,
        prefix=prefix,
        partitions=2,
        limits=Limits(max_open_tasks_per_tenant=quota),
    ) as m:
        client = m.client
        assert isinstance(client, Redis)
        events = EventLog()
        m.event_publisher.subscribe(events)
        await m.event_publisher.wait_ready()
        tenants = ["a"] * 45 + ["b"] * 45

        async def burst() -> list[Any]:
            return await asyncio.gather(
                *(m.create_task(ALICE, ORIGIN, tenant=t) for t in tenants),
                return_exceptions=True,
            )

        replies: list[Any] = []

        async def run() -> None:
            replies.extend(await burst())

        ran = await commands_of(client, run)
        # A tenant with a quota lives in its home partition: each tenant's 45 creates
        # are two calls (32 + 13), not 45.
        assert ran["evalsha"] <= 4, ran
        for tenant in ("a", "b"):
            mine = [r for t, r in zip(tenants, replies, strict=True) if t == tenant]
            created = [r for r in mine if not isinstance(r, BaseException)]
            refused = [r for r in mine if isinstance(r, BaseException)]
            assert len(created) == quota
            assert all(isinstance(r, QuotaExceededError) for r in refused), refused
            assert len(refused) == len(mine) - quota
            for task in created:
                assert await m.find_task(TaskRequestContext(ALICE, task.task_id)) == task
                await events.wait_for(task.task_id, 1)
        counts = Counter[str]()
        for partition in range(2):
            stats = await client.hgetall(KeySpace(prefix).stats(partition))
            counts.update(
                {k.decode() if isinstance(k, bytes) else k: int(v) for k, v in stats.items()}
            )
        assert counts[CREATED_FIELD] == 2 * quota
        assert counts[REFUSED_FIELDS["quota"]] == len(tenants) - 2 * quota

        # A batch whose reply is lost is sent again: each create finds its own task,
        # so none is created, counted or announced twice.
        (node,) = m._topology.primaries()
        flaky = LoseNextReply(node.pipeline)
        monkeypatch.setattr(node.pipeline, "call", flaky.call)
        monkeypatch.setattr(node.pipeline, "call_now", flaky.call_now)
        flaky.armed = True
        again = await asyncio.gather(*(m.create_task(ALICE, ORIGIN, tenant="c") for _ in range(10)))
        assert flaky.lost == 1
        marker = await m.create_task(ALICE, ORIGIN, tenant="c")
        await events.wait_for(marker.task_id, 1)
        for task in again:
            assert await m.find_task(TaskRequestContext(ALICE, task.task_id)) == task
            assert events.count(task.task_id) == 1
        seen = await m.inspect()
        assert seen.created == 2 * quota + 11


async def test_an_outcome_deletes_input_keys_only_after_input(standalone_backend: Backend) -> None:
    """A task that ran straight through has no input keys: its terminal write sends no
    DEL (one command a job of a drain); one that asked for input deletes them."""
    m = standalone_backend.manager
    client = standalone_backend.client
    assert isinstance(client, Redis)
    straight = (await m.create_task(ALICE, ORIGIN)).task_id
    asked = (await m.create_task(ALICE, ORIGIN)).task_id
    await m.request_input(asked, {"k": ELICIT})
    ran = await commands_of(client, lambda: m.complete_task(straight, {"ok": True}))
    assert "del" not in ran, ran
    ran = await commands_of(client, lambda: m.complete_task(asked, {"ok": True}))
    assert ran["del"] == 1, ran


@pytest.mark.parametrize("intruder", [BOB, OTHER_ENDPOINT], ids=["partition-key", "endpoint"])
async def test_unknown_and_unauthorized_run_the_same_redis_commands(
    standalone_backend: Backend, intruder: Any
) -> None:
    m = standalone_backend.manager
    client = standalone_backend.client
    assert isinstance(client, Redis)
    task = await m.create_task(ALICE, ORIGIN)
    await m.request_input(task.task_id, {"k": ELICIT})
    unknown = task.task_id[:-3] + ("AAA" if not task.task_id.endswith("AAA") else "BBB")
    for make in (
        lambda tid: m.find_task(TaskRequestContext(intruder, tid)),
        lambda tid: m.request_cancellation(TaskRequestContext(intruder, tid)),
        lambda tid: m.update_task(TaskUpdateContext(intruder, tid, {"k": ELICIT_ANSWER})),
    ):
        runs = []
        for tid in (task.task_id, unknown):

            async def attempt(tid: str = tid, make: Any = make) -> None:
                with contextlib.suppress(TaskNotFoundError):
                    await make(tid)

            runs.append(await commands_of(client, attempt))
        # One EXISTS on a grant key that does not exist, in both cases.
        assert runs[0] == runs[1] == Counter({"evalsha": 1, "exists": 1})


async def test_scripts_are_reloaded_after_the_cache_is_flushed(standalone_backend: Backend) -> None:
    m = standalone_backend.manager
    client = standalone_backend.client
    assert isinstance(client, Redis)
    task = await m.create_task(ALICE, ORIGIN)
    await client.script_flush()
    ran = await commands_of(client, lambda: m.find_task(TaskRequestContext(ALICE, task.task_id)))
    assert ran["evalsha"] == 1
    assert ran["eval"] == 1
    ran = await commands_of(client, lambda: m.find_task(TaskRequestContext(ALICE, task.task_id)))
    assert ran["evalsha"] == 1
    assert ran["eval"] == 0


async def test_keys_are_hash_tagged_per_partition(standalone_backend: Backend) -> None:
    m = standalone_backend.manager
    tasks = [await m.create_task(ALICE, ORIGIN) for _ in range(40)]
    await m.request_input(tasks[0].task_id, {"k": ELICIT})
    keys = await standalone_backend.all_keys()
    space = KeySpace(standalone_backend.prefix)
    partitions = {int(t.task_id.split(".")[0]) for t in tasks}
    assert len(partitions) > 4  # spread over partitions
    for key in keys:
        assert key.startswith("{" + standalone_backend.prefix + ":")
    for t in tasks:
        partition = int(t.task_id.split(".")[0])
        keys_of_task = [k for k in keys if t.task_id in k]
        # A task's keys and its partition's streams share one cluster slot.
        slots = {key_slot(k.encode()) for k in keys_of_task}
        slots |= {
            key_slot(space.work(partition).encode()),
            key_slot(space.events(partition).encode()),
        }
        assert len(slots) == 1


async def test_created_work_is_enqueued_and_terminal_work_is_removed(
    standalone_backend: Backend,
) -> None:
    m = standalone_backend.manager
    client = standalone_backend.client
    assert isinstance(client, Redis)
    task = await m.create_task(ALICE, ORIGIN, payload=b"job")
    partition = int(task.task_id.split(".")[0])
    work = standalone_backend.keys.work(partition)
    entries: Any = await client.xrange(work)
    assert [fields[b"t"].decode() for _, fields in entries] == [task.task_id]
    groups = await client.xinfo_groups(work)
    assert [g["name"] for g in groups] == [b"workers"]
    await m.complete_task(task.task_id, {"ok": True})
    assert await client.xrange(work) == []
    record = await client.hgetall(standalone_backend.keys.task(partition, task.task_id).task)
    assert b"pl" not in record  # the payload is dropped once the task is terminal


async def test_events_stream_is_bounded(redis_server: RedisServer, prefix: str) -> None:
    manager = RedisTaskManager.from_url(
        redis_server.url, prefix=prefix, partitions=1, events_maxlen=100
    )
    async with manager:
        for _ in range(600):
            await manager.create_task(ALICE, ORIGIN, ttl=timedelta(seconds=30))
        length = await manager.client.xlen(KeySpace(prefix).events(0))
        assert length < 300  # MAXLEN ~ trims in whole macro nodes


async def test_an_unreachable_redis_raises_backend_error_within_the_timeout() -> None:
    manager = RedisTaskManager.from_url("redis://127.0.0.1:1/0", timeout=0.5)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(BackendError) as caught:
        await manager.find_task(TaskRequestContext(ALICE, "1." + "A" * 24))
    assert loop.time() - started < 3
    assert "127.0.0.1" not in str(caught.value)
    with pytest.raises(BackendError):
        async with manager:
            pass
    await manager.client.aclose()


async def test_a_hung_redis_raises_backend_error_within_the_timeout(
    redis_server: RedisServer, prefix: str
) -> None:
    manager = RedisTaskManager.from_url(redis_server.url, prefix=prefix, timeout=0.3)
    async with manager:
        task = await manager.create_task(ALICE, ORIGIN)
        pauser = Redis.from_url(redis_server.url)
        await pauser.client_pause(1500, all=True)
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            with pytest.raises(BackendError):
                await manager.find_task(TaskRequestContext(ALICE, task.task_id))
            assert loop.time() - started < 1.2
        finally:
            await pauser.client_unpause()
            await pauser.aclose()


class LoseNextReply:
    """Wraps both ways a script call leaves (the auto-pipeline's next batch, and a call
    sent at once): the script runs, then the connection "breaks"."""

    def __init__(self, pipeline: AutoPipeline) -> None:
        self.pipelined = pipeline.call
        self.direct = pipeline.call_now
        self.armed = False
        self.lost = 0

    def _lose(self, reply: Any) -> Any:
        if self.armed:
            self.armed = False
            self.lost += 1
            # Redis ran the script; the caller sees a broken connection instead.
            raise RedisConnectionError("Connection closed by server.")
        return reply

    async def call(self, command: tuple[Any, ...], **companions: Any) -> Any:
        return self._lose(await self.pipelined(command, **companions))

    async def call_now(self, command: tuple[Any, ...], **companions: Any) -> Any:
        return self._lose(await self.direct(command, **companions))


async def test_every_script_is_safe_to_retry_after_a_lost_reply(
    standalone_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = standalone_backend.manager
    client = standalone_backend.client
    assert isinstance(client, Redis)
    (node,) = m._topology.primaries()
    pipeline = node.pipeline
    flaky = LoseNextReply(pipeline)
    monkeypatch.setattr(pipeline, "call", flaky.call)
    monkeypatch.setattr(pipeline, "call_now", flaky.call_now)
    events = EventLog()
    m.event_publisher.subscribe(events)
    await m.event_publisher.wait_ready()

    flaky.armed = True
    task = await m.create_task(ALICE, ORIGIN, payload=b"job")  # retried: finds its own task
    assert await m.find_task(TaskRequestContext(ALICE, task.task_id)) == task
    partition = int(task.task_id.split(".")[0])
    work = standalone_backend.keys.work(partition)
    assert await client.xlen(work) == 1  # enqueued once

    entries: Any = await client.xrange(work)
    ((entry_id, _),) = entries
    flaky.armed = True
    entry = WorkEntry(int(task.task_id.split(".")[0]), entry_id.decode(), task.task_id)
    claim = await m.work_queue.claim(
        entry, consumer="c1", lease=timedelta(seconds=30), max_attempts=5
    )
    assert (claim.outcome, claim.attempt) == (ClaimOutcome.RUN, 1)  # one claim, not two
    fence = claim.fence

    actions: list[Callable[[], Awaitable[Any]]] = [
        lambda: m.request_input(task.task_id, {"k": ELICIT}, "asking", fence=fence),
        lambda: m.update_task(TaskUpdateContext(ALICE, task.task_id, {"k": ELICIT_ANSWER})),
        lambda: m.request_cancellation(TaskRequestContext(ALICE, task.task_id)),
        lambda: m.work_queue.renew(
            task.task_id, fence=fence, consumer="c1", lease=timedelta(seconds=30)
        ),
        lambda: m.mark_working(task.task_id, "going", fence=fence),
        lambda: m.complete_task(task.task_id, {"ok": True}, "done", fence=fence),
    ]
    for action in actions:
        flaky.armed = True
        await action()
    assert flaky.lost == 8
    done = await m.find_task(TaskRequestContext(ALICE, task.task_id))
    assert done is not None
    assert done.status is TaskStatus.COMPLETED
    assert done.result == {"ok": True}
    await events.wait_for(task.task_id, 6)
    marker = await m.create_task(ALICE, ORIGIN)
    await events.wait_for(marker.task_id, 1)
    # Each change happened once: create, input, answer, intent, working, complete.
    assert events.count(task.task_id) == 6
    # And the stats counted each once: two creates, one first claim, one completion.
    seen = await m.inspect()
    assert (seen.created, seen.statuses["completed"], seen.pickup.total) == (2, 1, 1)


async def test_a_batch_claim_run_again_after_a_lost_reply_is_answered_with_what_it_took(
    redis_server: RedisServer, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``claim_next`` ran, leased four tasks (stream entries and tasks taken straight
    from their tenant's queue), and its reply was lost; the runner runs it again. The
    retry is told those four, with the fences the first run took, and claims nothing
    more: before, it claimed four others and the first four stayed leased to a worker
    that never heard of them, for a whole lease."""
    lease = timedelta(seconds=30)
    async with RedisTaskManager.from_url(redis_server.url, prefix=prefix, partitions=1) as m:
        ids = [(await m.create_task(ALICE, ORIGIN, tenant=f"t{i % 2}")).task_id for i in range(7)]
        client = m.client
        assert isinstance(client, Redis)
        keys = m.keyspace
        (node,) = m._topology.primaries()
        flaky = LoseNextReply(node.pipeline)
        monkeypatch.setattr(node.pipeline, "call", flaky.call)
        monkeypatch.setattr(node.pipeline, "call_now", flaky.call_now)
        flaky.armed = True
        claimed = await m.work_queue.claim_next(
            0, consumer="c1", count=4, lease=lease, max_attempts=5
        )
        assert flaky.lost == 1
        assert len(claimed) == 4
        kinds = {entry.entry_id == DIRECT_ENTRY for entry, _ in claimed}
        assert kinds == {True, False}  # both ways a batch claims
        records = {
            task_id: await client.hmget(keys.task(0, task_id).task, "lo", "fn", "at")
            for task_id in ids
        }
        leased = {task_id for task_id, (owner, _, _) in records.items() if owner == b"c1"}
        assert {entry.task_id for entry, _ in claimed} == leased
        for entry, claim in claimed:
            assert entry.task_id is not None
            assert (claim.outcome, claim.attempt) == (ClaimOutcome.RUN, 1)
            assert records[entry.task_id][1:] == [str(claim.fence).encode(), b"1"]
        # The next call takes the other three, and its token is its own.
        rest = await m.work_queue.claim_next(0, consumer="c1", count=4, lease=lease, max_attempts=5)
        assert {entry.task_id for entry, _ in rest} == set(ids) - leased
        # A stopped worker leaves nothing for a retry that cannot come.
        assert await client.hexists(keys.stats(0), "claim:c1")
        await m.work_queue.forget_consumer(0, "c1")
        assert not await client.hexists(keys.stats(0), "claim:c1")
        # A killed one's goes with its consumer, when another worker removes it as stale.
        await client.xgroup_createconsumer(keys.work(0), WORK_GROUP, "killed")
        await client.hset(keys.stats(0), "claim:killed", "token 0-1 0.x")

        async def removed() -> bool:
            await m.work_queue.remove_stale_consumers(0, keep="c1", idle=timedelta(milliseconds=1))
            return not await client.hexists(keys.stats(0), "claim:killed")

        await wait_until(removed, what="the stale consumer's claim record to go")


async def test_a_bug_in_the_event_tail_is_told_once_and_not_retried(
    standalone_backend: Backend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Only Redis failing is retried. A bug (a planted TypeError) stops the tail, logged
    once with its traceback; the manager goes on, its listeners left to polling."""
    m = standalone_backend.manager
    reads = 0

    async def planted_read(*args: Any) -> Any:
        nonlocal reads
        reads += 1
        raise TypeError("planted")

    monkeypatch.setattr(redis_events._Tail, "read", planted_read)
    with (
        caplog.at_level(logging.WARNING, logger="redis_tasks.events"),
        m.event_publisher.subscribe(lambda task_id: None),
    ):
        await asyncio.wait_for(m.event_publisher.wait_ready(), 5)
        await asyncio.sleep(0.5)  # a retry (after 50 ms, then 100...) would have come
        task = await m.create_task(ALICE, ORIGIN)
        assert await m.find_task(TaskRequestContext(ALICE, task.task_id)) == task
    assert reads == 1
    told_once_with_traceback(caplog.records, "redis_tasks.events", "planted_read")


async def test_an_evicting_maxmemory_policy_is_warned_about_at_start(
    tmp_path: Path, redis_server: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    evicting = start_redis_server(tmp_path, "--maxmemory-policy", "allkeys-lru")
    try:
        with caplog.at_level(logging.WARNING, logger="redis_tasks"):
            async with RedisTaskManager.from_url(evicting.url, prefix=prefix):
                pass
        (warning,) = [r for r in caplog.records if getattr(r, "event", "") == "eviction_policy"]
        assert "allkeys-lru" in warning.getMessage()
        assert "noeviction" in warning.getMessage()
    finally:
        evicting.stop()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="redis_tasks"):
        async with RedisTaskManager.from_url(redis_server.url, prefix=prefix):
            pass
    assert not [r for r in caplog.records if getattr(r, "event", "") == "eviction_policy"]


# Sizes around the 64-byte piece and the 512-byte bound of lua/includes/common.lua.
_LONG_SIZES = (1, 63, 64, 65, 128, 129, 511, 512, 513, 3000)


def _origin_of(size: int) -> TaskOrigin:
    text = '{"tool":"t","arguments":{"x":"' + "o" * size + '"}}'
    return TaskOrigin.from_persisted_string(text)


@pytest.mark.parametrize("size", _LONG_SIZES)
async def test_long_values_round_trip_and_the_record_stays_a_listpack(
    standalone_backend: Backend, size: int
) -> None:
    m = standalone_backend.manager
    client = standalone_backend.client
    assert isinstance(client, Redis)
    who = RequestContext("/" + "e" * (min(size, 250) - 1), "k" * min(size, 250))
    origin = _origin_of(size)
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    metadata = {"m": "d" * size}
    task = await m.create_task(who, origin, payload=payload, metadata=metadata)
    partition = int(task.task_id.split(".")[0])
    record_key = standalone_backend.keys.task(partition, task.task_id).task
    small = len(origin.to_persisted_string()) <= 512 and size < 500
    assert (await client.object("encoding", record_key) == b"listpack") == small
    ctx = TaskRequestContext(who, task.task_id)
    entry: Any = await client.hget(record_key, "wk")
    work = WorkEntry(int(task.task_id.split(".")[0]), entry.decode(), task.task_id)
    claim = await m.work_queue.claim(
        work, consumer="c", lease=timedelta(seconds=30), max_attempts=3
    )
    assert claim.origin is not None
    assert claim.origin.to_persisted_string() == origin.to_persisted_string()
    assert claim.payload == payload
    # Status messages replace each other, long and short, without leftovers.
    for message in ("s" * size, "short", "t" * min(size * 2, 4096), None, "u" * size):
        await m.mark_working(task.task_id, message, fence=claim.fence)
        found = await m.find_task(ctx)
        assert found is not None
        assert found.status_message == message
    result = {"content": [{"type": "text", "text": "r" * size}]}
    await m.complete_task(task.task_id, result, fence=claim.fence)
    found = await m.find_task(ctx)
    assert found is not None
    assert found.result == result
    assert found.metadata == metadata
    assert found.status_message is None  # completing without a message clears it
    fields = {f if isinstance(f, bytes) else f.encode() for f in await client.hkeys(record_key)}
    assert not {f for f in fields if f.startswith((b"pl", b"wk", b"sm"))}
    # Another binding still sees nothing.
    assert await m.find_task(TaskRequestContext(BOB, task.task_id)) is None
