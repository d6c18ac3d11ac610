"""Bad input to any operation: a clear typed error, and nothing written (DESIGN §2)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from redis_tasks import (
    InputRequest,
    JsonRpcError,
    LimitExceededError,
    Limits,
    RequestContext,
    TaskNotFoundError,
    TaskOrigin,
    TaskRequestContext,
    TaskUpdateContext,
    ValidationError,
)
from tests.support.backends import Backend, BackendFactory
from tests.support.helpers import (
    ALICE,
    ELICIT,
    ELICIT_ANSWER,
    ORIGIN,
    expect_each_raises,
    operations,
)

SMALL = Limits(
    max_endpoint_bytes=32,
    max_partition_key_bytes=256,
    max_origin_bytes=512,
    max_payload_bytes=64,
    max_result_bytes=128,
    max_error_bytes=128,
    max_metadata_bytes=64,
    max_status_message_bytes=32,
    max_input_requests_per_round=3,
    max_input_key_bytes=16,
    max_input_request_bytes=128,
    max_input_response_bytes=128,
    max_json_depth=8,
)

Call = Callable[[Any, str], Awaitable[Any]]
NON_STR_KEY: Any = {7: ELICIT_ANSWER}


def deep(levels: int, wrap: Callable[[Any], Any] = lambda v: {"d": v}) -> Any:
    """A value ``levels`` deep (objects by default), built without recursion."""
    value: Any = 1
    for _ in range(levels):
        value = wrap(value)
    return value


BAD_CALLS: dict[str, tuple[type[Exception], Call]] = {
    # create_task
    "endpoint-too-long": (
        LimitExceededError,
        lambda m, t: m.create_task(RequestContext("/" + "e" * 40), ORIGIN),
    ),
    "partition-key-257-bytes": (
        LimitExceededError,
        lambda m, t: m.create_task(RequestContext("/mcp", "k" * 257), ORIGIN),
    ),
    "partition-key-multibyte-over": (
        LimitExceededError,
        lambda m, t: m.create_task(RequestContext("/mcp", "é" * 129), ORIGIN),
    ),
    "partition-key-lone-surrogate": (
        ValidationError,
        lambda m, t: m.create_task(RequestContext("/mcp", "\ud800"), ORIGIN),
    ),
    "origin-too-large": (
        LimitExceededError,
        lambda m, t: m.create_task(
            ALICE, TaskOrigin.from_persisted_string('{"a":"' + "x" * 600 + '"}', max_bytes=10_000)
        ),
    ),
    "origin-not-an-origin": (ValidationError, lambda m, t: m.create_task(ALICE, '{"a":1}')),
    "payload-too-large": (
        LimitExceededError,
        lambda m, t: m.create_task(ALICE, ORIGIN, payload=b"p" * 65),
    ),
    "payload-not-bytes": (
        ValidationError,
        lambda m, t: m.create_task(ALICE, ORIGIN, payload="text"),
    ),
    "ttl-zero": (ValidationError, lambda m, t: m.create_task(ALICE, ORIGIN, ttl=timedelta(0))),
    "ttl-fractional-ms": (
        ValidationError,
        lambda m, t: m.create_task(ALICE, ORIGIN, ttl=timedelta(microseconds=1500)),
    ),
    "ttl-not-timedelta": (ValidationError, lambda m, t: m.create_task(ALICE, ORIGIN, ttl=60)),
    "poll-negative": (
        ValidationError,
        lambda m, t: m.create_task(ALICE, ORIGIN, poll_interval=timedelta(seconds=-1)),
    ),
    "metadata-too-large": (
        LimitExceededError,
        lambda m, t: m.create_task(ALICE, ORIGIN, metadata={"m": "x" * 100}),
    ),
    "metadata-not-json": (
        ValidationError,
        lambda m, t: m.create_task(ALICE, ORIGIN, metadata={"m": object()}),
    ),
    "metadata-nan": (
        ValidationError,
        lambda m, t: m.create_task(ALICE, ORIGIN, metadata={"m": float("nan")}),
    ),
    # worker operations on an existing task
    "status-message-too-long": (LimitExceededError, lambda m, t: m.mark_working(t, "s" * 33)),
    "status-message-not-str": (ValidationError, lambda m, t: m.mark_working(t, 42)),
    "fence-negative": (ValidationError, lambda m, t: m.mark_working(t, fence=-1)),
    "fence-bool": (ValidationError, lambda m, t: m.mark_working(t, fence=True)),
    "result-too-large": (LimitExceededError, lambda m, t: m.complete_task(t, {"r": "x" * 200})),
    "result-not-object": (ValidationError, lambda m, t: m.complete_task(t, ["not", "object"])),
    "result-not-json": (ValidationError, lambda m, t: m.complete_task(t, {"r": {1, 2}})),
    "result-bytes": (ValidationError, lambda m, t: m.complete_task(t, {"r": b"raw"})),
    "result-non-str-key": (ValidationError, lambda m, t: m.complete_task(t, {1: "x"})),
    "result-infinite": (ValidationError, lambda m, t: m.complete_task(t, {"r": float("inf")})),
    "result-huge-int": (ValidationError, lambda m, t: m.complete_task(t, {"r": 2**70})),
    "result-too-deep": (LimitExceededError, lambda m, t: m.complete_task(t, deep(20))),
    "result-status-message-too-long": (
        LimitExceededError,
        lambda m, t: m.complete_task(t, {"ok": True}, "s" * 33),
    ),
    "error-not-jsonrpc": (
        ValidationError,
        lambda m, t: m.fail_task(t, {"code": 1, "message": "x"}),
    ),
    "error-too-large": (
        LimitExceededError,
        lambda m, t: m.fail_task(t, JsonRpcError(code=1, message="x" * 200)),
    ),
    "error-data-not-json": (
        ValidationError,
        lambda m, t: m.fail_task(t, JsonRpcError(code=1, message="x", data={"d": object()})),
    ),
    "cancel-status-message-too-long": (LimitExceededError, lambda m, t: m.cancel_task(t, "s" * 40)),
    "input-requests-empty": (ValidationError, lambda m, t: m.request_input(t, {})),
    "input-requests-too-many": (
        LimitExceededError,
        lambda m, t: m.request_input(t, {f"k{i}": ELICIT for i in range(4)}),
    ),
    "input-key-too-long": (LimitExceededError, lambda m, t: m.request_input(t, {"k" * 17: ELICIT})),
    "input-key-empty": (ValidationError, lambda m, t: m.request_input(t, {"": ELICIT})),
    "input-request-wrong-type": (
        ValidationError,
        lambda m, t: m.request_input(t, {"k": {"method": "roots/list"}}),
    ),
    "input-request-too-large": (
        LimitExceededError,
        lambda m, t: m.request_input(
            t, {"k": InputRequest(method="elicitation/create", params={"m": "x" * 200})}
        ),
    ),
    "input-request-too-deep": (
        LimitExceededError,
        lambda m, t: m.request_input(
            t, {"k": InputRequest(method="elicitation/create", params=deep(20))}
        ),
    ),
    # client operations
    "update-answer-too-large": (
        LimitExceededError,
        lambda m, t: m.update_task(
            TaskUpdateContext(ALICE, t, {"k": {"action": "accept", "content": {"x": "y" * 200}}})
        ),
    ),
    "update-answer-not-json": (
        ValidationError,
        lambda m, t: m.update_task(
            TaskUpdateContext(ALICE, t, {"k": {"action": "accept", "content": {"x": object()}}})
        ),
    ),
    "update-too-many-answers": (
        LimitExceededError,
        lambda m, t: m.update_task(
            TaskUpdateContext(ALICE, t, {f"k{i}": ELICIT_ANSWER for i in range(4)})
        ),
    ),
    "update-key-too-long": (
        LimitExceededError,
        lambda m, t: m.update_task(TaskUpdateContext(ALICE, t, {"k" * 17: ELICIT_ANSWER})),
    ),
    "update-non-str-key": (
        ValidationError,
        lambda m, t: m.update_task(TaskUpdateContext(ALICE, t, NON_STR_KEY)),
    ),
    "find-partition-key-too-long": (
        LimitExceededError,
        lambda m, t: m.find_task(TaskRequestContext(RequestContext("/mcp", "k" * 300), t)),
    ),
    "cancel-endpoint-too-long": (
        LimitExceededError,
        lambda m, t: m.request_cancellation(
            TaskRequestContext(RequestContext("/" + "e" * 40, "alice"), t)
        ),
    ),
}


@pytest.fixture
async def small(make_backend: BackendFactory) -> Any:
    async with make_backend(limits=SMALL) as b:
        yield b


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
async def test_bad_input_raises_a_typed_error_and_stores_nothing(small: Backend, case: str) -> None:
    m = small.manager
    task = await m.create_task(ALICE, ORIGIN)
    await m.request_input(task.task_id, {"k": ELICIT}, "waiting")
    before = await small.dump()
    expected, call = BAD_CALLS[case]
    with pytest.raises(expected) as caught:
        await call(m, task.task_id)
    assert await small.dump() == before
    # Messages name the problem, never the data.
    message = str(caught.value)
    assert "xxxx" not in message
    assert "alice" not in message
    assert task.task_id not in message


#: Task IDs that are not ours: each is "not found", whatever it holds.
MALFORMED_IDS: dict[str, str] = {
    "empty": "",
    "word": "nope",
    "short": "1.short",
    "crlf": "1." + "A" * 24 + "\r\n",
    "nul": "1." + "A" * 23 + "\x00",
    "brace": "1." + "A" * 23 + "{",
    "glob": "1.A*AAAAAAAAAAAAAAAAAAAAAA",
    "partition-over": "16384." + "A" * 24,
    "colon": "1:" + "A" * 24,
    "1MB": "x" * 1_000_000,
    "surrogate": "1." + "\udcff" * 24,
    "fullwidth-digit": "\uff11." + "A" * 24,
    "hash-tag": "{rt:1}." + "A" * 24,
    "key-suffix": "1." + "A" * 24 + ":req",
}


@pytest.mark.parametrize("task_id", list(MALFORMED_IDS.values()), ids=list(MALFORMED_IDS))
async def test_malformed_ids_are_not_found_and_touch_nothing(
    backend: Backend, task_id: str
) -> None:
    m = backend.manager
    await m.create_task(ALICE, ORIGIN)
    before = await backend.dump()
    assert await m.find_task(TaskRequestContext(ALICE, task_id)) is None
    await expect_each_raises(TaskNotFoundError, operations(m, task_id))
    assert await backend.dump() == before


@pytest.mark.redis_only
async def test_an_id_of_another_prefix_is_not_found_and_touches_nothing(
    backend: Backend, make_backend: BackendFactory
) -> None:
    foreign = await backend.manager.create_task(ALICE, ORIGIN)
    foreign_state = await backend.dump()
    async with make_backend(prefix=backend.prefix + "x") as other:
        m = other.manager
        assert await m.find_task(TaskRequestContext(ALICE, foreign.task_id)) is None
        await expect_each_raises(TaskNotFoundError, operations(m, foreign.task_id))
        assert [k for k in await other.all_keys() if foreign.task_id in k] == []
    assert await backend.dump() == foreign_state


def test_bad_contexts_raise_validation_errors() -> None:
    with pytest.raises(ValidationError):
        RequestContext("")
    with pytest.raises(ValidationError):
        RequestContext("/mcp", "")
    with pytest.raises(ValidationError):
        RequestContext(None)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        TaskRequestContext(ALICE, None)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        TaskUpdateContext(ALICE, "x", [("k", 1)])  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        TaskRequestContext("alice", "x")  # type: ignore[arg-type]


def test_request_context_repr_hides_the_partition_key() -> None:
    assert "alice" not in repr(RequestContext("/mcp", "alice"))
    assert "secret" not in repr(TaskUpdateContext(ALICE, "t", {"k": "secret"}))
