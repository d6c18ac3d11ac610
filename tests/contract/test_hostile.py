"""A hostile input corpus at the default limits, and proof that it never reaches outside the prefix.

``test_bad_input.py`` checks each limit at its edge with small limits. Here the inputs
are the ones an attacker or a broken client sends: megabyte strings, 100,000-deep
nesting, cycles, lone surrogates (text that is not UTF-8), NUL and CR/LF, glob and
hash-tag characters, and values of the wrong type. Each must get a typed error (or
"not found", or be ignored where the contract says so), and store nothing.

The MONITOR test then replays the whole corpus, this file's and
``test_bad_input.py``'s, against a real redis-server while a raw ``MONITOR``
connection records every command the server ran, including those run inside our
scripts. ``COMMAND GETKEYS`` names the keys of each one, and every key must lie under
the manager's prefix. The server's whole keyspace must be unchanged afterwards.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from redis_tasks import (
    InputRequest,
    JsonRpcError,
    LimitExceededError,
    RedisTaskManager,
    RedisTasksError,
    RequestContext,
    TaskNotFoundError,
    TaskOrigin,
    TaskRequestContext,
    TaskStatus,
    TaskUpdateContext,
    ValidationError,
)
from redis_tasks.testing import RedisServer
from tests.support.backends import Backend
from tests.support.helpers import (
    ALICE,
    ELICIT,
    ELICIT_ANSWER,
    ORIGIN,
    ROOTS,
    SAMPLE,
    WORKER_OPERATIONS,
    expect_each_raises,
    operations,
)

from .test_bad_input import BAD_CALLS, MALFORMED_IDS, SMALL, deep

MB = 1 << 20
Call = Callable[[Any, str], Awaitable[Any]]


def cyclic() -> dict[str, Any]:
    """A dict that contains itself."""
    loop: dict[str, Any] = {}
    loop["self"] = loop
    return loop


#: Values of the wrong type where a str is declared (typed Any to reach the checks).
NOT_STR: list[Any] = [b"{}", 7, None]


def answer(task_id: str, responses: Any) -> TaskUpdateContext:
    return TaskUpdateContext(ALICE, task_id, responses)


# Each case: the error it must raise, and the call (manager, existing task ID).
HOSTILE: dict[str, tuple[type[Exception], Call]] = {
    # request contexts
    "endpoint-1MB": (
        LimitExceededError,
        lambda m, t: m.create_task(RequestContext("/" + "e" * MB), ORIGIN),
    ),
    "partition-key-1MB": (
        LimitExceededError,
        lambda m, t: m.create_task(RequestContext("/mcp", "k" * MB), ORIGIN),
    ),
    "partition-key-257-bytes-of-4-byte-chars": (
        LimitExceededError,
        lambda m, t: m.create_task(RequestContext("/mcp", "\U0001f600" * 64 + "k"), ORIGIN),
    ),
    "endpoint-not-utf8": (
        ValidationError,
        lambda m, t: m.create_task(RequestContext("/mcp\udcff"), ORIGIN),
    ),
    "find-partition-key-not-utf8": (
        ValidationError,
        lambda m, t: m.find_task(TaskRequestContext(RequestContext("/mcp", "\udc80"), t)),
    ),
    "update-partition-key-1MB": (
        LimitExceededError,
        lambda m, t: m.update_task(
            TaskUpdateContext(RequestContext("/mcp", "k" * MB), t, {"k": ELICIT_ANSWER})
        ),
    ),
    # origins (the codec refuses them before any manager sees them)
    "origin-1MB": (
        LimitExceededError,
        lambda m, t: m.create_task(
            ALICE, TaskOrigin.from_persisted_string('{"a":"' + "x" * MB + '"}')
        ),
    ),
    "origin-100k-deep-text": (
        LimitExceededError,
        lambda m, t: m.create_task(
            ALICE, TaskOrigin.from_persisted_string("[" * 30_000 + "]" * 30_000)
        ),
    ),
    "origin-100k-deep-state": (
        LimitExceededError,
        lambda m, t: m.create_task(ALICE, TaskOrigin.from_persisted_state(deep(100_000))),
    ),
    "origin-cyclic-state": (
        LimitExceededError,
        lambda m, t: m.create_task(ALICE, TaskOrigin.from_persisted_state(cyclic())),
    ),
    "origin-not-utf8": (
        ValidationError,
        lambda m, t: m.create_task(ALICE, TaskOrigin.from_persisted_string('{"a":"\udcff"}')),
    ),
    "origin-bytes": (
        ValidationError,
        lambda m, t: m.create_task(ALICE, TaskOrigin.from_persisted_string(NOT_STR[0])),
    ),
    "origin-nul-truncation": (
        ValidationError,
        lambda m, t: m.create_task(ALICE, TaskOrigin.from_persisted_string('{"a":1}\x00{"b":2}')),
    ),
    # payloads, metadata, results, errors
    "payload-1MB-plus-1": (
        LimitExceededError,
        lambda m, t: m.create_task(ALICE, ORIGIN, payload=b"p" * (MB + 1)),
    ),
    "payload-list-of-ints": (
        ValidationError,
        lambda m, t: m.create_task(ALICE, ORIGIN, payload=[1, 2]),
    ),
    "payload-memoryview-1MB-plus-1": (
        LimitExceededError,
        lambda m, t: m.create_task(ALICE, ORIGIN, payload=memoryview(b"p" * (MB + 1))),
    ),
    "metadata-100k-deep": (
        LimitExceededError,
        lambda m, t: m.create_task(ALICE, ORIGIN, metadata=deep(100_000)),
    ),
    "metadata-cyclic": (
        LimitExceededError,
        lambda m, t: m.create_task(ALICE, ORIGIN, metadata=cyclic()),
    ),
    "result-8MB": (LimitExceededError, lambda m, t: m.complete_task(t, {"r": "x" * (8 * MB)})),
    "result-100k-deep-lists": (
        LimitExceededError,
        lambda m, t: m.complete_task(t, {"r": deep(100_000, lambda v: [v])}),
    ),
    "result-cyclic": (LimitExceededError, lambda m, t: m.complete_task(t, cyclic())),
    "result-not-utf8": (ValidationError, lambda m, t: m.complete_task(t, {"r": "\udcff"})),
    "result-not-utf8-key": (ValidationError, lambda m, t: m.complete_task(t, {"\ud800": 1})),
    "error-100k-deep-data": (
        LimitExceededError,
        lambda m, t: m.fail_task(t, JsonRpcError(code=-32000, message="x", data=deep(100_000))),
    ),
    "error-message-not-utf8": (
        ValidationError,
        lambda m, t: m.fail_task(t, JsonRpcError(code=-32000, message="\udcff")),
    ),
    "status-message-1MB": (LimitExceededError, lambda m, t: m.mark_working(t, "s" * MB)),
    "status-message-not-utf8": (ValidationError, lambda m, t: m.mark_working(t, "\udcff")),
    "fence-huge": (ValidationError, lambda m, t: m.mark_working(t, fence=2**64)),
    "fence-10k-digits": (ValidationError, lambda m, t: m.complete_task(t, {}, fence=10**10_000)),
    "fence-text": (ValidationError, lambda m, t: m.mark_working(t, fence="1")),
    # input requests
    "input-request-100k-deep": (
        LimitExceededError,
        lambda m, t: m.request_input(
            t, {"z": InputRequest(method="elicitation/create", params=deep(100_000))}
        ),
    ),
    "input-request-1MB": (
        LimitExceededError,
        lambda m, t: m.request_input(
            t, {"z": InputRequest(method="elicitation/create", params={"m": "x" * MB})}
        ),
    ),
    "input-requests-100k": (
        LimitExceededError,
        lambda m, t: m.request_input(t, {f"z{i}": ROOTS for i in range(100_000)}),
    ),
    "input-key-1MB": (LimitExceededError, lambda m, t: m.request_input(t, {"z" * MB: ROOTS})),
    "input-key-not-utf8": (ValidationError, lambda m, t: m.request_input(t, {"\udcff": ROOTS})),
    "input-request-a-dict": (
        ValidationError,
        lambda m, t: m.request_input(t, {"z": {"method": "roots/list", "params": {}}}),
    ),
    "input-requests-a-list": (ValidationError, lambda m, t: m.request_input(t, [("z", ROOTS)])),
    # answers
    "answers-100k": (
        LimitExceededError,
        lambda m, t: m.update_task(answer(t, {f"k{i}": ELICIT_ANSWER for i in range(100_000)})),
    ),
    "answer-1MB": (
        LimitExceededError,
        lambda m, t: m.update_task(
            answer(t, {"k": {"action": "accept", "content": {"x": "y" * MB}}})
        ),
    ),
    "answer-100k-deep": (
        LimitExceededError,
        lambda m, t: m.update_task(
            answer(t, {"k": {"action": "accept", "content": deep(100_000)}})
        ),
    ),
    "answer-cyclic": (LimitExceededError, lambda m, t: m.update_task(answer(t, {"k": cyclic()}))),
    "answer-not-utf8": (
        ValidationError,
        lambda m, t: m.update_task(
            answer(t, {"k": {"action": "accept", "content": {"x": "\udcff"}}})
        ),
    ),
    "answer-key-1MB": (
        LimitExceededError,
        lambda m, t: m.update_task(answer(t, {"k" * MB: ELICIT_ANSWER})),
    ),
    "answer-bytes": (
        ValidationError,
        lambda m, t: m.update_task(answer(t, {"k": b'{"action":"accept"}'})),
    ),
    "answers-a-list": (ValidationError, lambda m, t: m.update_task(answer(t, [("k", 1)]))),
    # task IDs of the wrong type, to the client operations (worker operations take
    # them as not found: see test_wrong_type_task_ids_are_not_found_by_workers)
    "find-id-bytes": (
        ValidationError,
        lambda m, t: m.find_task(TaskRequestContext(ALICE, NOT_STR[0])),
    ),
    "cancel-id-int": (
        ValidationError,
        lambda m, t: m.request_cancellation(TaskRequestContext(ALICE, NOT_STR[1])),
    ),
    "update-id-none": (ValidationError, lambda m, t: m.update_task(answer(NOT_STR[2], {}))),
}

#: Answers of the wrong type or variant: the contract ignores them (DESIGN §2).
WRONG_ANSWERS: list[Any] = [
    5,
    "accept",
    None,
    True,
    1.5,
    [ELICIT_ANSWER],
    {},
    {"action": 5},
    {"action": "maybe"},
    {"action": "accept", "content": 5},
    {"action": "accept", "content": [1]},
    {"roots": "file:///"},
    {"roots": [{"uri": 5}]},
    {"role": "assistant"},
    {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": 5},
]

#: Partition keys full of characters that mean something to Redis or to our key
#: layout; each must bind a task exactly, and a key one byte off must not find it.
ODD_PARTITION_KEYS: list[str] = [
    "{rt:0}",
    "a:b:c",
    "*?[^]",
    "line\r\nbreak",
    "nul\x00byte",
    "k" * 256,
    "\U0001f600" * 64,  # exactly 256 UTF-8 bytes
    " ",
]


@pytest.fixture
async def target(backend: Backend) -> tuple[Backend, str]:
    """A default-limits backend with a task waiting on three input requests."""
    task = await backend.manager.create_task(ALICE, ORIGIN)
    await backend.manager.request_input(
        task.task_id, {"k": ELICIT, "s": SAMPLE, "r": ROOTS}, "waiting"
    )
    return backend, task.task_id


@pytest.mark.parametrize("case", sorted(HOSTILE))
async def test_hostile_input_raises_a_typed_error_and_stores_nothing(
    target: tuple[Backend, str], case: str
) -> None:
    backend, task_id = target
    before = await backend.dump()
    expected, call = HOSTILE[case]
    with pytest.raises(expected) as caught:
        await call(backend.manager, task_id)
    assert await backend.dump() == before
    message = str(caught.value)
    assert len(message) < 200, "messages name the problem, never echo the input"
    assert task_id not in message


async def test_wrong_type_task_ids_are_not_found_by_workers(target: tuple[Backend, str]) -> None:
    backend, task_id = target
    before = await backend.dump()
    for wrong in (task_id.encode(), 7, None, [task_id], {task_id: 1}):
        await expect_each_raises(
            TaskNotFoundError,
            operations(backend.manager, wrong),  # type: ignore[arg-type]
            only=WORKER_OPERATIONS,
        )
    assert await backend.dump() == before


async def test_answers_of_the_wrong_type_are_ignored(target: tuple[Backend, str]) -> None:
    backend, task_id = target
    m = backend.manager
    before = await backend.dump()
    for wrong in WRONG_ANSWERS:
        await m.update_task(answer(task_id, {"k": wrong, "s": wrong, "r": wrong}))
    # Nothing accepted, nothing journalled: the stored state is untouched.
    assert await backend.dump() == before
    task = await m.find_task(TaskRequestContext(ALICE, task_id))
    assert task is not None
    assert task.status is TaskStatus.INPUT_REQUIRED
    assert sorted(task.input_requests) == ["k", "r", "s"]
    assert await m.take_input_responses(task_id) == {}


@pytest.mark.parametrize("key", ODD_PARTITION_KEYS, ids=lambda k: repr(k)[:20])
async def test_odd_partition_keys_bind_exactly(backend: Backend, key: str) -> None:
    m = backend.manager
    owner = RequestContext("/mcp", key)
    task = await m.create_task(owner, ORIGIN)
    assert await m.find_task(TaskRequestContext(owner, task.task_id)) == task
    # One byte (or one character) off, and no longer than the limit allows.
    near = [
        key[:-1] or "x",
        key[:-1] + chr(ord(key[-1]) ^ 1),
        key.upper() if key.upper() != key else " " + key[1:] + "x"[: 256 - len(key.encode())],
    ]
    for other in near:
        stranger = RequestContext("/mcp", other)
        assert await m.find_task(TaskRequestContext(stranger, task.task_id)) is None
        with pytest.raises(TaskNotFoundError):
            await m.request_cancellation(TaskRequestContext(stranger, task.task_id))
    assert not await m.is_cancellation_requested(task.task_id)


# -- MONITOR: no key outside the prefix, ever -------------------------------------------

_TOKEN = re.compile(rb'"((?:[^"\\]|\\.)*)"')
_ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"a": b"\a", b"b": b"\b"}


def _unquote(text: bytes) -> bytes:
    """Undo ``sdscatrepr``: the quoting MONITOR applies to every argument."""
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i : i + 1] != b"\\":
            out += text[i : i + 1]
            i += 1
        elif text[i + 1 : i + 2] == b"x":
            out.append(int(text[i + 2 : i + 4], 16))
            i += 4
        else:
            escaped = text[i + 1 : i + 2]
            out += _ESCAPES.get(escaped, escaped)
            i += 2
    return bytes(out)


class Monitor:
    """A raw ``MONITOR`` connection that keeps every command the server runs."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self.commands: list[list[bytes]] = []

    @classmethod
    async def open(cls, server: RedisServer) -> Monitor:
        # MONITOR lines carry every argument, quoted: a 1 MB argument makes a
        # line of up to 4 MB.
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port, limit=64 * MB)
        writer.write(b"MONITOR\r\n")
        await writer.drain()
        assert await reader.readline() == b"+OK\r\n"
        return cls(reader, writer)

    async def until(self, marker: bytes) -> None:
        """Read until a command carrying ``marker`` shows up."""
        async with asyncio.timeout(60):
            while True:
                line = await self._reader.readuntil(b"\r\n")
                args = [_unquote(t) for t in _TOKEN.findall(line.partition(b"]")[2])]
                if marker in args:
                    return
                self.commands.append(args)

    async def close(self) -> None:
        self._writer.close()
        await self._writer.wait_closed()


async def _keys_of(admin: aioredis.Redis, command: list[bytes]) -> list[bytes]:
    """The key arguments of ``command``, as the server itself names them."""
    try:
        keys: list[bytes | str] = await admin.command_getkeys(*command)
    except ResponseError:
        return []  # a command without keys (PING, INFO, SCRIPT LOAD, ...)
    return [k.encode("utf-8", "surrogateescape") if isinstance(k, str) else k for k in keys]


async def _whole_keyspace(admin: aioredis.Redis) -> set[bytes]:
    return {k async for k in admin.scan_iter(count=1000)}


async def _run_corpus(
    manager: RedisTaskManager, cases: dict[str, tuple[type[Exception], Call]]
) -> int:
    """Run every case on a fresh waiting task; each must raise. Returns the count."""
    task = await manager.create_task(ALICE, ORIGIN)
    await manager.request_input(task.task_id, {"k": ELICIT}, "waiting")
    for name, (_, call) in cases.items():
        try:
            await call(manager, task.task_id)
        except RedisTasksError:
            continue
        raise AssertionError(f"{name} did not raise")
    return len(cases)


@pytest.mark.redis_only
@pytest.mark.standalone_only
async def test_the_whole_corpus_touches_no_key_outside_the_prefix(
    redis_server: RedisServer,
) -> None:
    prefix = f"t{uuid.uuid4().hex[:12]}"
    admin = aioredis.Redis.from_url(redis_server.url)
    monitor = await Monitor.open(redis_server)
    try:
        keyspace_before = await _whole_keyspace(admin)
        ran = 0
        async with (
            RedisTaskManager.from_url(redis_server.url, prefix=prefix) as default,
            RedisTaskManager.from_url(redis_server.url, prefix=prefix, limits=SMALL) as small,
        ):
            ran += await _run_corpus(default, HOSTILE)
            ran += await _run_corpus(small, BAD_CALLS)
            for task_id in MALFORMED_IDS.values():
                assert await default.find_task(TaskRequestContext(ALICE, task_id)) is None
                await expect_each_raises(TaskNotFoundError, operations(default, task_id))
                ran += 1
            waiting = await default.create_task(ALICE, ORIGIN)
            await default.request_input(waiting.task_id, {"k": ELICIT}, "waiting")
            for wrong in WRONG_ANSWERS:
                await default.update_task(answer(waiting.task_id, {"k": wrong}))
        marker = uuid.uuid4().hex.encode()
        await admin.echo(marker)
        await monitor.until(marker)
        assert ran > 100
        assert len(monitor.commands) > ran, "MONITOR saw the corpus's script calls"
        touched: set[bytes] = set()
        for command in monitor.commands:
            touched.update(await _keys_of(admin, command))
        outside = sorted(k[:80] for k in touched if not k.startswith(f"{{{prefix}:".encode()))
        assert outside == []
        # The corpus's three waiting tasks (and their partitions' streams) are all it
        # left behind.
        created = await _whole_keyspace(admin) - keyspace_before
        assert all(k.startswith(f"{{{prefix}:".encode()) for k in created)
        tasks = {k.split(b":task:")[1].split(b":")[0] for k in created if b":task:" in k}
        assert len(tasks) == 3
    finally:
        await monitor.close()
        await admin.aclose()
