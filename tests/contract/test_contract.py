"""The task-manager contract (DESIGN §2), run on every backend.

Each test is named after the rule it checks. The suite is parametrised over the
in-memory reference, fakeredis, a real redis-server (standalone, as a restricted ACL
user, and a cluster), and standalone Valkey 9.1 and Redis 8.2 (directly and as that
ACL user; see conftest).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from redis_tasks import (
    ClaimOutcome,
    InputKeyReusedError,
    InputRequest,
    InternalError,
    JsonRpcError,
    LeaseLostError,
    LimitExceededError,
    Limits,
    RequestContext,
    TaskEventPublisher,
    TaskManager,
    TaskNotFoundError,
    TaskOrigin,
    TaskRequestContext,
    TaskStatus,
    TaskTerminalError,
    TaskUpdateContext,
)
from redis_tasks._base import Outcome
from tests.support.backends import BACKENDS, EXTRA_ACL, EXTRA_SERVERS, Backend, BackendFactory
from tests.support.helpers import (
    ALICE,
    ANONYMOUS,
    BOB,
    ELICIT,
    ELICIT_ANSWER,
    ORIGIN,
    OTHER_ENDPOINT,
    ROOTS,
    ROOTS_ANSWER,
    SAMPLE,
    SAMPLE_ANSWER,
    WORKER_OPERATIONS,
    EventLog,
    count_finish_batches,
    expect_each_raises,
    operations,
    wait_until,
)


@pytest.fixture(params=[*BACKENDS, *EXTRA_SERVERS, *EXTRA_ACL])
def backend_name(request: pytest.FixtureRequest) -> str:
    """Which backend the contract runs on: conftest's, plus the other server builds,
    directly and as the README's ACL user (only here: the contract is what a server of
    another version must keep)."""
    name: str = request.param
    return name


RESULT = {"content": [{"type": "text", "text": "done"}], "isError": False}
ERROR = JsonRpcError(code=-32603, message="API rate limit exceeded", data={"retry": 3})


async def find(m: Any, task_id: str, who: RequestContext = ALICE) -> Any:
    return await m.find_task(TaskRequestContext(who, task_id))


async def update(
    m: Any, task_id: str, answers: dict[str, Any], who: RequestContext = ALICE
) -> None:
    await m.update_task(TaskUpdateContext(who, task_id, answers))


async def new_task(m: Any, who: RequestContext = ALICE, **options: Any) -> str:
    task = await m.create_task(who, ORIGIN, **options)
    return str(task.task_id)


async def held_task(m: Any) -> str:
    """A new task a worker holds (claimed, its lease live), as one that runs it would."""
    task_id = await new_task(m)
    partition = int(task_id.split(".")[0])
    claimed = await m.work_queue.claim_next(
        partition, consumer="w1", count=1, lease=timedelta(minutes=5), max_attempts=5
    )
    assert [(e.task_id, c.outcome) for e, c in claimed] == [(task_id, ClaimOutcome.RUN)]
    return task_id


# -- creation and durability ------------------------------------------------------------


def _protocol_members() -> dict[str, Any]:
    """What ``TaskManager``'s own body defines: its methods and its property."""
    members = {}
    for name, value in vars(TaskManager).items():
        function = value.fget if isinstance(value, property) else value
        if inspect.isfunction(function) and function.__qualname__ == f"TaskManager.{name}":
            members[name] = value
    return members


def _parameters(function: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def test_both_managers_implement_the_task_manager_protocol(backend: Backend) -> None:
    # isinstance() against the runtime-checkable protocol only asks that each member
    # name exists; this checks each member's kind and parameters as well.
    manager_class = type(backend.manager)
    members = _protocol_members()
    assert {"__aenter__", "event_publisher", "find_task", "complete_task"} <= members.keys()
    for name, expected in members.items():
        actual = inspect.getattr_static(manager_class, name, None)
        where = f"{manager_class.__name__}.{name}"
        if isinstance(expected, property):
            assert isinstance(actual, property), f"{where} is not a property"
            continue
        assert inspect.isfunction(actual), f"{where} is missing or not a method"
        assert inspect.iscoroutinefunction(actual) == inspect.iscoroutinefunction(expected), (
            f"{where}: async differs from the protocol"
        )
        assert _parameters(actual) == _parameters(expected), f"{where}: parameters differ"


async def test_created_task_is_immediately_findable(backend: Backend) -> None:
    m = backend.manager
    task = await m.create_task(ALICE, ORIGIN, payload=b"work")
    found = await find(m, task.task_id)
    assert found is not None
    assert found == task


async def test_created_task_starts_working_with_default_ttl_and_poll_interval(
    backend: Backend,
) -> None:
    task = await backend.manager.create_task(ALICE, ORIGIN)
    assert task.status is TaskStatus.WORKING
    assert task.ttl == timedelta(hours=1)
    assert task.poll_interval == timedelta(seconds=1)
    assert task.created_at == task.last_updated_at
    assert abs(task.created_at - datetime.now(UTC)) < timedelta(minutes=1)
    assert task.input_requests == {}
    assert task.result is None
    assert task.error is None


async def test_task_ids_are_unique_url_safe_and_carry_128_random_bits(backend: Backend) -> None:
    ids = {await new_task(backend.manager) for _ in range(50)}
    assert len(ids) == 50
    for task_id in ids:
        partition, token = task_id.split(".")
        assert 0 <= int(partition) < 16
        assert len(token) * 6 >= 128
        assert all(c.isalnum() or c in "-_" for c in token)


async def test_explicit_ttl_poll_interval_and_metadata_are_kept(backend: Backend) -> None:
    m = backend.manager
    task = await m.create_task(
        ALICE,
        ORIGIN,
        ttl=timedelta(minutes=5),
        poll_interval=timedelta(milliseconds=250),
        metadata={"tenant": "acme", "n": [1, 2.5]},
    )
    found = await find(m, task.task_id)
    assert found.ttl == timedelta(minutes=5)
    assert found.poll_interval == timedelta(milliseconds=250)
    assert found.metadata == {"tenant": "acme", "n": [1, 2.5]}


async def test_ttl_over_the_configured_maximum_is_refused(backend: Backend) -> None:
    with pytest.raises(LimitExceededError):
        await backend.manager.create_task(ALICE, ORIGIN, ttl=timedelta(days=2))


async def test_unlimited_ttl_only_where_the_configuration_allows_it(
    make_backend: BackendFactory,
) -> None:
    unlimited = Limits(default_ttl=None, max_ttl=None)
    async with make_backend(limits=unlimited) as b:
        task = await b.manager.create_task(ALICE, ORIGIN)
        assert task.ttl is None
        assert (await find(b.manager, task.task_id)).ttl is None
        assert task.to_wire()["ttlMs"] is None
        if b.is_redis:
            keys = b.keys.task(int(task.task_id.split(".")[0]), task.task_id)
            b.immortal_allowed.add(keys.task)
            b.immortal_allowed.add(keys.grant(b"/mcp", b"=alice"))
    with pytest.raises(ValueError, match="unlimited"):
        Limits(default_ttl=None)


# -- authorization ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("owner", "intruder"),
    [
        (ALICE, OTHER_ENDPOINT),  # wrong endpoint
        (ALICE, BOB),  # wrong partition key
        (ALICE, ANONYMOUS),  # anonymous asks for a keyed task
        (ANONYMOUS, ALICE),  # keyed asks for an anonymous task
        (ANONYMOUS, RequestContext("/other", None)),  # anonymous, wrong endpoint
    ],
    ids=[
        "wrong-endpoint",
        "wrong-partition-key",
        "anonymous-vs-keyed",
        "keyed-vs-anonymous",
        "anonymous-wrong-endpoint",
    ],
)
async def test_unknown_and_unauthorized_are_indistinguishable(
    backend: Backend, owner: RequestContext, intruder: RequestContext
) -> None:
    m = backend.manager
    task_id = await new_task(m, owner)
    await m.request_input(task_id, {"q": ELICIT})
    unknown_id = task_id[:-4] + ("AAAA" if not task_id.endswith("AAAA") else "BBBB")

    assert await find(m, task_id, intruder) is None
    assert await find(m, unknown_id, intruder) is None

    failures = []
    for target in (task_id, unknown_id):
        for call in (
            m.update_task(TaskUpdateContext(intruder, target, {"q": ELICIT_ANSWER})),
            m.request_cancellation(TaskRequestContext(intruder, target)),
        ):
            with pytest.raises(TaskNotFoundError) as caught:
                await call
            failures.append((type(caught.value), str(caught.value)))
    assert len(set(failures)) == 1
    message = failures[0][1]
    assert task_id not in message
    assert "alice" not in message
    assert "/mcp" not in message

    # The intruder changed nothing: the owner still sees the untouched task.
    task = await find(m, task_id, owner)
    assert task.status is TaskStatus.INPUT_REQUIRED
    assert not await m.is_cancellation_requested(task_id)


async def test_anonymous_task_is_bound_to_its_endpoint_alone(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m, ANONYMOUS)
    assert (await find(m, task_id, RequestContext("/mcp"))).task_id == task_id
    assert await find(m, task_id, RequestContext("/mcp/")) is None


async def test_malformed_task_id_is_simply_not_found(backend: Backend) -> None:
    m = backend.manager
    real = await new_task(m)
    for bad in [
        "",
        "x",
        real + "\n",
        real.replace(".", ":"),
        "{rt:1}:task:x",
        "99999." + "A" * 24,
        "1." + "A" * 23,
        "01." + "A" * 24,
        real + "A",
        "*",
        "1.AAAAAAAAAAAAAAAAAAAAAA*A",
    ]:
        assert await find(m, bad) is None
        await expect_each_raises(TaskNotFoundError, operations(m, bad))


# -- input requests and answers -------------------------------------------------------


async def test_input_required_snapshot_lists_outstanding_requests(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m)
    assert await m.request_input(task_id, {"name": ELICIT, "llm": SAMPLE}, "need input") == {}
    task = await find(m, task_id)
    assert task.status is TaskStatus.INPUT_REQUIRED
    assert task.status_message == "need input"
    assert task.input_requests == {"name": ELICIT, "llm": SAMPLE}
    assert task.to_wire()["inputRequests"]["name"] == {
        "method": ELICIT.method,
        "params": ELICIT.params,
    }


async def test_update_accepts_a_partial_subset_of_answers(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m)
    await m.request_input(task_id, {"name": ELICIT, "llm": SAMPLE, "dirs": ROOTS})
    await update(m, task_id, {"name": ELICIT_ANSWER})
    task = await find(m, task_id)
    assert task.status is TaskStatus.INPUT_REQUIRED
    assert set(task.input_requests) == {"llm", "dirs"}
    assert await m.take_input_responses(task_id) == {"name": ELICIT_ANSWER}


async def test_last_answer_returns_the_task_to_working(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m)
    await m.request_input(task_id, {"name": ELICIT, "dirs": ROOTS}, "waiting")
    await update(m, task_id, {"name": ELICIT_ANSWER})
    await update(m, task_id, {"dirs": ROOTS_ANSWER})
    task = await find(m, task_id)
    assert task.status is TaskStatus.WORKING
    assert task.input_requests == {}
    assert task.status_message is None  # the wait's message no longer applies
    assert await m.take_input_responses(task_id) == {"name": ELICIT_ANSWER, "dirs": ROOTS_ANSWER}


async def test_answers_to_unknown_keys_are_ignored(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m)
    await m.request_input(task_id, {"name": ELICIT})
    before = await find(m, task_id)
    await update(m, task_id, {"never-issued": ELICIT_ANSWER})
    assert await find(m, task_id) == before
    assert await m.take_input_responses(task_id) == {}


async def test_answers_to_already_answered_keys_are_ignored(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m)
    await m.request_input(task_id, {"name": ELICIT, "dirs": ROOTS})
    await update(m, task_id, {"name": ELICIT_ANSWER})
    await update(m, task_id, {"name": {"action": "decline"}})
    assert await m.take_input_responses(task_id) == {"name": ELICIT_ANSWER}
    assert set((await find(m, task_id)).input_requests) == {"dirs"}


async def test_answers_to_superseded_keys_are_ignored(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m)
    await m.request_input(task_id, {"old": ELICIT})
    await m.request_input(task_id, {"new": ROOTS})  # a new round supersedes "old"
    assert set((await find(m, task_id)).input_requests) == {"new"}
    await update(m, task_id, {"old": ELICIT_ANSWER})
    assert await m.take_input_responses(task_id) == {}
    assert (await find(m, task_id)).status is TaskStatus.INPUT_REQUIRED


async def test_mark_working_supersedes_outstanding_requests(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m)
    await m.request_input(task_id, {"name": ELICIT})
    await m.mark_working(task_id, "going on without it")
    task = await find(m, task_id)
    assert task.status is TaskStatus.WORKING
    assert task.input_requests == {}
    await update(m, task_id, {"name": ELICIT_ANSWER})  # ignored: not input_required
    assert await m.take_input_responses(task_id) == {}


@pytest.mark.parametrize(
    ("request_", "wrong_answer"),
    [
        (ELICIT, SAMPLE_ANSWER),
        (ELICIT, ROOTS_ANSWER),
        (SAMPLE, ELICIT_ANSWER),
        (ROOTS, SAMPLE_ANSWER),
        (ELICIT, {"action": "maybe"}),
        (ROOTS, {"roots": "nope"}),
        (ELICIT, "accept"),
        (SAMPLE, None),
        (ROOTS, [1, 2]),
    ],
    ids=[
        "elicit<-sample",
        "elicit<-roots",
        "sample<-elicit",
        "roots<-sample",
        "bad-action",
        "bad-roots",
        "string",
        "null",
        "list",
    ],
)
async def test_answers_of_the_wrong_variant_are_ignored(
    backend: Backend, request_: InputRequest, wrong_answer: Any
) -> None:
    m = backend.manager
    task_id = await new_task(m)
    await m.request_input(task_id, {"k": request_})
    await update(m, task_id, {"k": wrong_answer})
    task = await find(m, task_id)
    assert task.status is TaskStatus.INPUT_REQUIRED
    assert set(task.input_requests) == {"k"}
    assert await m.take_input_responses(task_id) == {}


async def test_each_variant_answers_its_own_request(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m)
    await m.request_input(task_id, {"e": ELICIT, "s": SAMPLE, "r": ROOTS})
    await update(m, task_id, {"e": ELICIT_ANSWER, "s": SAMPLE_ANSWER, "r": ROOTS_ANSWER})
    assert (await find(m, task_id)).status is TaskStatus.WORKING
    assert await m.take_input_responses(task_id) == {
        "e": ELICIT_ANSWER,
        "s": SAMPLE_ANSWER,
        "r": ROOTS_ANSWER,
    }


async def test_update_on_a_task_not_input_required_is_ignored(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m)
    before = await find(m, task_id)
    await update(m, task_id, {"name": ELICIT_ANSWER})
    assert await find(m, task_id) == before
    await m.complete_task(task_id, RESULT)
    await update(m, task_id, {"name": ELICIT_ANSWER})  # terminal: ignored, no error
    assert (await find(m, task_id)).status is TaskStatus.COMPLETED


async def test_update_of_unknown_task_raises_not_found(backend: Backend) -> None:
    with pytest.raises(TaskNotFoundError):
        await update(backend.manager, "3." + "A" * 24, {"x": ELICIT_ANSWER})


async def test_take_input_responses_hands_out_each_answer_once(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m)
    await m.request_input(task_id, {"a": ELICIT, "b": ROOTS})
    await update(m, task_id, {"a": ELICIT_ANSWER})
    assert await m.take_input_responses(task_id) == {"a": ELICIT_ANSWER}
    assert await m.take_input_responses(task_id) == {}
    await update(m, task_id, {"b": ROOTS_ANSWER})
    assert await m.take_input_responses(task_id) == {"b": ROOTS_ANSWER}


async def test_replayed_request_input_with_the_same_keys_is_a_no_op(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m)
    await m.request_input(task_id, {"name": ELICIT, "dirs": ROOTS}, "waiting")
    before = await find(m, task_id)
    log = EventLog()
    with m.event_publisher.subscribe(log):
        await m.event_publisher.wait_ready()
        # Same keys, same requests (params in another order): nothing changes.
        reordered = InputRequest(method=ELICIT.method, params=dict(reversed(ELICIT.params.items())))
        assert await m.request_input(task_id, {"dirs": ROOTS, "name": reordered}, "waiting") == {}
        marker = await new_task(m)  # an event after the replay, to know delivery caught up
        await log.wait_for(marker, 1)
    assert await find(m, task_id) == before
    assert log.count(task_id) == 0


async def test_answered_keys_give_their_recorded_answers_on_replay(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m)
    await m.request_input(task_id, {"name": ELICIT, "dirs": ROOTS})
    await update(m, task_id, {"name": ELICIT_ANSWER})
    # A handler re-run after a crash asks the same round again.
    replay = await m.request_input(task_id, {"name": ELICIT, "dirs": ROOTS})
    assert replay == {"name": ELICIT_ANSWER}
    task = await find(m, task_id)
    assert set(task.input_requests) == {"dirs"}
    await update(m, task_id, {"dirs": ROOTS_ANSWER})
    assert await m.request_input(task_id, {"name": ELICIT, "dirs": ROOTS}) == {
        "name": ELICIT_ANSWER,
        "dirs": ROOTS_ANSWER,
    }
    assert (await find(m, task_id)).status is TaskStatus.WORKING
    # Answers handed out by the replay are not handed out again.
    assert await m.take_input_responses(task_id) == {}


async def test_reusing_an_input_key_for_a_different_request_is_an_error(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m)
    await m.request_input(task_id, {"name": ELICIT})
    before = await backend.dump()
    other = InputRequest(method="elicitation/create", params={"message": "something else"})
    with pytest.raises(InputKeyReusedError, match="name"):
        await m.request_input(task_id, {"fresh": ROOTS, "name": other})
    with pytest.raises(InputKeyReusedError):
        await m.request_input(task_id, {"name": ROOTS})
    assert await backend.dump() == before
    # Also after it was answered: the key stays bound for the task's lifetime.
    await update(m, task_id, {"name": ELICIT_ANSWER})
    with pytest.raises(InputKeyReusedError):
        await m.request_input(task_id, {"name": other})


# -- cancellation -----------------------------------------------------------------------


async def test_request_cancellation_records_durable_intent(backend: Backend) -> None:
    m = backend.manager
    task_id = await held_task(m)
    assert not await m.is_cancellation_requested(task_id)
    await m.request_cancellation(TaskRequestContext(ALICE, task_id))
    assert await m.is_cancellation_requested(task_id)
    # Intent only, while a worker holds the task: the status is the worker's to change.
    assert (await find(m, task_id)).status is TaskStatus.WORKING
    await m.request_cancellation(TaskRequestContext(ALICE, task_id))  # idempotent
    await m.cancel_task(task_id, "stopped on request")
    task = await find(m, task_id)
    assert task.status is TaskStatus.CANCELLED
    assert task.status_message == "stopped on request"


async def test_cancellation_intent_may_lose_to_completion(backend: Backend) -> None:
    m = backend.manager
    task_id = await held_task(m)
    await m.request_cancellation(TaskRequestContext(ALICE, task_id))
    await m.complete_task(task_id, RESULT)
    assert (await find(m, task_id)).status is TaskStatus.COMPLETED


async def test_a_task_no_worker_holds_ends_cancelled_when_asked(backend: Backend) -> None:
    """No worker holds it (it waits for one): the library honours the request itself,
    in the same step. Asking again, or finishing it, finds it ended."""
    m = backend.manager
    task_id = await new_task(m)
    await m.request_cancellation(TaskRequestContext(ALICE, task_id))
    task = await find(m, task_id)
    assert task.status is TaskStatus.CANCELLED
    assert task.status_message is None
    await m.request_cancellation(TaskRequestContext(ALICE, task_id))  # idempotent
    assert await find(m, task_id) == task
    with pytest.raises(TaskTerminalError):
        await m.complete_task(task_id, RESULT)


@pytest.mark.parametrize("terminal", ["complete", "fail", "cancel"])
async def test_cancellation_of_a_terminal_task_is_accepted(backend: Backend, terminal: str) -> None:
    m = backend.manager
    task_id = await new_task(m)
    await finish(m, task_id, terminal, "x")
    before = await find(m, task_id)
    await m.request_cancellation(TaskRequestContext(ALICE, task_id))
    assert await find(m, task_id) == before


async def test_request_cancellation_of_unknown_task_raises_not_found(backend: Backend) -> None:
    with pytest.raises(TaskNotFoundError):
        await backend.manager.request_cancellation(TaskRequestContext(ALICE, "0." + "B" * 24))


# -- terminal transitions ---------------------------------------------------------------


async def finish(m: Any, task_id: str, how: str, token: str, fence: int | None = None) -> None:
    if how == "complete":
        await m.complete_task(task_id, {"winner": token}, fence=fence)
    elif how == "fail":
        await m.fail_task(task_id, JsonRpcError(code=-32000, message="x", data=token), fence=fence)
    else:
        await m.cancel_task(task_id, token, fence=fence)


def winner_of(task: Any) -> str:
    if task.status is TaskStatus.COMPLETED:
        return str(task.result["winner"])
    if task.status is TaskStatus.FAILED:
        return str(task.error.data)
    return str(task.status_message)


async def test_exactly_one_terminal_transition_wins_a_race(backend: Backend) -> None:
    m = backend.manager
    for _ in range(5):
        task_id = await new_task(m)
        ways = ["complete", "fail", "cancel"]
        outcomes = await asyncio.gather(
            *(finish(m, task_id, ways[i % 3], f"c{i}") for i in range(30)), return_exceptions=True
        )
        winners = [f"c{i}" for i, o in enumerate(outcomes) if o is None]
        assert len(winners) == 1
        assert all(isinstance(o, TaskTerminalError) for o in outcomes if o is not None)
        assert winner_of(await find(m, task_id)) == winners[0]


@pytest.mark.parametrize("how", ["complete", "fail", "cancel"])
async def test_another_call_finds_the_task_terminal_even_with_the_identical_outcome(
    backend: Backend, how: str
) -> None:
    m = backend.manager
    task_id = await new_task(m)
    await finish(m, task_id, how, "same")
    before = await find(m, task_id)
    for other_how in ("complete", "fail", "cancel"):
        with pytest.raises(TaskTerminalError):
            await finish(m, task_id, other_how, "same")
        with pytest.raises(TaskTerminalError):
            await finish(m, task_id, other_how, "other")
    with pytest.raises(TaskTerminalError):  # the fence of no lease is no help either
        await finish(m, task_id, how, "same", fence=0)
    with pytest.raises(LeaseLostError):
        await finish(m, task_id, how, "same", fence=5)
    assert await find(m, task_id) == before


async def test_fenced_finishes_made_together_each_get_their_own_answer(backend: Backend) -> None:
    """A worker's fenced finishes of one loop turn go to Redis as one call per
    partition (finish_batch.lua); each still gets exactly the answer it gets alone,
    and each task ends exactly as it would alone. Kinds: a fresh task, the holder's
    same transition again, another transition on a terminal task, a stale fence, an
    unknown ID, a task that asked for input first, and a cancel with a message."""
    m = backend.manager
    gathered = count_finish_batches(m)  # the Redis backends: see that batches really formed
    kinds = ["fresh", "again", "other", "stale", "unknown", "asked", "cancel"]
    plan: list[tuple[str, str]] = []
    for i in range(8 * len(kinds)):  # enough for partitions with several of each turn
        kind = kinds[i % len(kinds)]
        if kind == "unknown":
            task_id = f"{i % m.partitions}." + "Unknown0" * 3
        else:
            task_id = await new_task(m)
        if kind in ("again", "other"):
            await finish(m, task_id, "complete", "first", fence=0)
        elif kind == "asked":
            await m.request_input(task_id, {"k": ELICIT}, "asking", fence=0)
        plan.append((kind, task_id))

    def call(kind: str, task_id: str) -> Any:
        if kind == "again":
            return finish(m, task_id, "complete", "first", fence=0)
        if kind == "other":
            return finish(m, task_id, "fail", "second", fence=0)
        if kind == "stale":
            return finish(m, task_id, "complete", "late", fence=5)
        if kind == "cancel":
            return finish(m, task_id, "cancel", "bye", fence=0)
        return finish(m, task_id, "complete", kind, fence=0)

    answers = await asyncio.gather(*(call(k, t) for k, t in plan), return_exceptions=True)
    expected: dict[str, type[BaseException] | None] = {
        "other": TaskTerminalError,
        "stale": LeaseLostError,
        "unknown": TaskNotFoundError,
    }
    for (kind, task_id), answer in zip(plan, answers, strict=True):
        wanted = expected.get(kind)
        assert (type(answer) if answer is not None else None) is wanted, (kind, answer)
        if kind == "unknown":
            continue
        task = await find(m, task_id)
        if kind == "cancel":
            assert (task.status, task.status_message) == (TaskStatus.CANCELLED, "bye")
        elif kind == "stale":
            assert task.status is TaskStatus.WORKING
        else:
            assert (task.status, winner_of(task)) == (
                TaskStatus.COMPLETED,
                "first" if kind in ("again", "other") else kind,
            )
    if gathered is not None:
        assert max(gathered) >= 2, gathered


async def test_a_retry_of_the_same_call_is_accepted(backend: Backend) -> None:
    """What the script runner sends again after a lost reply: the same arguments,
    operation ID included. Only that call may repeat; the same outcome under
    another operation ID is another call."""
    m = backend.manager
    task_id = await new_task(m)
    outcome = Outcome(TaskStatus.CANCELLED, b"bye", b"", b"", b"", b"0123456789abcdef")
    await m._finish(task_id, outcome)
    before = await find(m, task_id)
    await m._finish(task_id, outcome)
    assert await find(m, task_id) == before
    with pytest.raises(TaskTerminalError):
        await m._finish(task_id, dataclasses.replace(outcome, operation=b"fedcba9876543210"))
    assert await find(m, task_id) == before


@pytest.mark.parametrize("how", ["complete", "fail", "cancel"])
async def test_the_lease_holder_may_repeat_its_own_transition_and_no_other(
    backend: Backend, how: str
) -> None:
    """A worker's calls are told apart by their fence: the holder repeating its own
    identical transition (a retry) is accepted; a different one, or anyone else's
    identical one, finds the task terminal."""
    m = backend.manager
    task_id = await new_task(m)  # never claimed: its fence is 0
    await finish(m, task_id, how, "same", fence=0)
    before = await find(m, task_id)
    await finish(m, task_id, how, "same", fence=0)
    assert await find(m, task_id) == before
    others = [w for w in ("complete", "fail", "cancel") if w != how]
    for other_how in others:
        with pytest.raises(TaskTerminalError):
            await finish(m, task_id, other_how, "same", fence=0)
    with pytest.raises(TaskTerminalError):
        await finish(m, task_id, how, "same")
    assert await find(m, task_id) == before


async def test_result_and_terminal_status_are_written_together(backend: Backend) -> None:
    m = backend.manager
    completed, failed, cancelled = [await new_task(m) for _ in range(3)]
    await m.request_input(completed, {"x": ELICIT}, "waiting")
    await m.complete_task(completed, RESULT, "all done")
    await m.fail_task(failed, ERROR)
    await m.cancel_task(cancelled)
    task = await find(m, completed)
    assert (task.status, task.result, task.error, task.input_requests) == (
        TaskStatus.COMPLETED,
        RESULT,
        None,
        {},
    )
    assert task.status_message == "all done"
    task = await find(m, failed)
    assert (task.status, task.result, task.error) == (TaskStatus.FAILED, None, ERROR)
    assert task.status_message is None
    task = await find(m, cancelled)
    assert (task.status, task.result, task.error) == (TaskStatus.CANCELLED, None, None)


async def test_a_result_with_is_error_true_is_still_completed(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m)
    result = {"content": [{"type": "text", "text": "bad input"}], "isError": True}
    await m.complete_task(task_id, result)
    task = await find(m, task_id)
    assert task.status is TaskStatus.COMPLETED
    assert task.to_wire()["result"] == result


async def test_terminal_is_final_for_every_worker_operation(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m)
    await m.complete_task(task_id, RESULT)
    before = await find(m, task_id)
    terminal_refused = tuple(n for n in WORKER_OPERATIONS if n != "is_cancellation_requested")
    await expect_each_raises(TaskTerminalError, operations(m, task_id), only=terminal_refused)
    assert await find(m, task_id) == before


async def test_every_operation_on_an_unknown_task_raises_not_found(backend: Backend) -> None:
    m = backend.manager
    assert await find(m, "5." + "C" * 24) is None
    await expect_each_raises(TaskNotFoundError, operations(m, "5." + "C" * 24))


async def test_a_stale_fence_is_refused_with_lease_lost(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m)
    stale = operations(m, task_id, fence=7)
    await expect_each_raises(LeaseLostError, stale, only=WORKER_OPERATIONS)
    assert (await find(m, task_id)).status is TaskStatus.WORKING
    # The current fence (0 for a task never claimed) is accepted.
    await m.complete_task(task_id, RESULT, fence=0)
    # A zombie learns it lost its lease even after the task finished.
    with pytest.raises(LeaseLostError):
        await m.complete_task(task_id, RESULT, fence=7)


async def test_a_claim_within_a_lease_renewed_before_any_claim_runs(backend: Backend) -> None:
    # Found by tests/contract/test_differential.py: renewing with fence 0 (a task never
    # claimed) records a lease but no attempt; the same consumer's claim then took
    # the "own lease" path, whose reply a Lua nil cut short: IndexError, not a claim.
    m = backend.manager
    task_id = await new_task(m, payload=b"work")
    lease = timedelta(seconds=30)
    queue = m.work_queue
    assert await queue.renew(task_id, fence=0, consumer="w1", lease=lease) is False
    reader = queue.reader(int(task_id.split(".")[0]), "w1", timedelta(seconds=1))
    (entry,) = await reader.read(1)
    await reader.close()
    assert entry.task_id == task_id
    claim = await queue.claim(entry, consumer="w1", lease=lease, max_attempts=3)
    assert (claim.outcome, claim.fence, claim.attempt) == (ClaimOutcome.RUN, 0, 0)
    assert claim.payload == b"work"
    assert claim.origin == ORIGIN


# -- status, timestamps, retention ------------------------------------------------------


async def test_status_message_follows_each_transition(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m)
    await m.mark_working(task_id, "50%")
    assert (await find(m, task_id)).status_message == "50%"
    await m.mark_working(task_id)
    assert (await find(m, task_id)).status_message is None
    await m.mark_working(task_id, "ünïcødé ✓ " + "x" * 100)
    assert (await find(m, task_id)).status_message == "ünïcødé ✓ " + "x" * 100


async def test_last_updated_at_moves_forward_and_never_back(backend: Backend) -> None:
    m = backend.manager
    task = await m.create_task(ALICE, ORIGIN)
    seen = [task.last_updated_at]
    for step in range(6):
        await m.mark_working(task.task_id, f"step {step}")
        current = await find(m, task.task_id)
        assert current.created_at == task.created_at
        seen.append(current.last_updated_at)
    assert seen == sorted(seen)
    assert all(t >= task.created_at for t in seen)


async def test_last_updated_at_holds_when_the_server_clock_steps_back(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m)
    # As after a failover to a server whose clock runs behind: the stored update
    # time is ahead of the clock that the next transition reads.
    ahead = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    ahead_ms = str(int(ahead.timestamp() * 1000)).encode()
    if backend.is_redis:
        assert backend.client is not None
        key = backend.keys.task(int(task_id.split(".")[0]), task_id).task
        await backend.client.hset(key, "ua", ahead_ms)
    else:
        m._tasks[task_id].fields["ua"] = ahead_ms
    await m.mark_working(task_id, "step")
    await m.request_input(task_id, {"k": ELICIT})
    await update(m, task_id, {"k": ELICIT_ANSWER})
    assert (await find(m, task_id)).last_updated_at == ahead
    await m.complete_task(task_id, RESULT)
    assert (await find(m, task_id)).last_updated_at == ahead


async def test_expired_task_is_unknown_to_every_operation(backend: Backend) -> None:
    m = backend.manager
    task_id = await new_task(m, ttl=timedelta(milliseconds=150))
    await m.request_input(task_id, {"x": ELICIT})
    await update(m, task_id, {"x": ELICIT_ANSWER})
    await m.request_input(task_id, {"y": ROOTS})

    async def gone() -> bool:
        return await find(m, task_id) is None

    await wait_until(gone, what="expiry")
    await expect_each_raises(TaskNotFoundError, operations(m, task_id))
    if backend.is_redis:
        assert [k for k in await backend.all_keys() if task_id in k] == []


@pytest.mark.redis_only
async def test_every_key_of_a_task_expires_with_it(backend: Backend) -> None:
    m = backend.manager
    task = await m.create_task(ALICE, ORIGIN, ttl=timedelta(minutes=3))
    await m.request_input(task.task_id, {"x": ELICIT, "y": ROOTS})
    await update(m, task.task_id, {"x": ELICIT_ANSWER})
    keys = [k for k in await backend.all_keys() if task.task_id in k]
    assert {k.rsplit(":", 1)[-1] for k in keys} >= {"req", "iss", "ans", "jrn"}
    expected = int((task.created_at + timedelta(minutes=3)).timestamp() * 1000)
    assert backend.client is not None
    for key in keys:
        assert await backend.client.pexpiretime(key) == expected


@pytest.mark.redis_only
async def test_a_terminal_task_keeps_no_input_keys(backend: Backend) -> None:
    """The terminal write drops the input keys of a task that had input rounds (and
    skips the DEL for one that never was updated: nothing to drop); only the record
    and its grant stay."""
    m = backend.manager
    asked = await new_task(m)
    await m.request_input(asked, {"x": ELICIT, "y": ROOTS})
    await update(m, asked, {"x": ELICIT_ANSWER})
    await m.request_input(asked, {"z": ELICIT})
    straight = await new_task(m)
    assert {k.rsplit(":", 1)[-1] for k in await backend.all_keys() if asked in k} >= {
        "req", "iss", "ans", "jrn",
    }  # fmt: skip
    await m.complete_task(asked, {"ok": True})
    await m.fail_task(straight, JsonRpcError(code=-32001, message="no"))
    for task_id in (asked, straight):
        left = [k for k in await backend.all_keys() if task_id in k]
        assert [k.rsplit(":", 2)[-2] for k in left] == ["task"], left


# -- origins ----------------------------------------------------------------------------

ODD_ORIGINS = [
    '{"b":1,"a":2}',
    '  {\n\t"a" : [ 1 , 2.50 , {"z":null, "y":true} ] ,"b":"x"\r\n}  ',
    '{"esc":"\\u00e9\\ud83d\\ude00\\n\\"\\\\","raw":"é😀"}',
    '{"long":3.14159265358979323846264338327950288419716939937510582097494459}',
    '{"big":123456789012345678901234567890,"tiny":1e-400,"huge":1E+400,"neg":-0.0}',
    '{"dup-looking":"a","dup-looking2":"a","unicode-key-é":{}}',
    '{"lone":"\\ud800"}',
]


@pytest.mark.parametrize("text", ODD_ORIGINS)
async def test_origin_survives_byte_for_byte(backend: Backend, text: str) -> None:
    m = backend.manager
    origin = TaskOrigin.from_persisted_string(text)
    task = await m.create_task(ALICE, origin)
    found = await find(m, task.task_id)
    assert found.origin.to_persisted_string() == text
    assert found.origin == origin
    assert hash(found.origin) == hash(origin)


# -- snapshot validation --------------------------------------------------------------


async def test_a_stored_task_that_does_not_fit_its_status_is_never_returned(
    backend: Backend,
) -> None:
    m = backend.manager
    task_id = await new_task(m)
    await m.complete_task(task_id, RESULT)
    # Corrupt the record behind the manager's back: completed without a result.
    if backend.is_redis:
        assert backend.client is not None
        key = backend.keys.task(int(task_id.split(".")[0]), task_id).task
        await backend.client.hdel(key, "rs")
    else:
        del m._tasks[task_id].fields["rs"]
    with pytest.raises(InternalError) as caught:
        await find(m, task_id)
    assert "rs" not in str(caught.value)
    assert task_id not in str(caught.value)


# -- events -----------------------------------------------------------------------------


async def test_event_publisher_is_the_same_instance_for_the_managers_lifetime(
    backend: Backend,
) -> None:
    m = backend.manager
    first = m.event_publisher
    assert isinstance(first, TaskEventPublisher)
    await new_task(m)
    assert m.event_publisher is first


async def test_every_durable_change_emits_one_task_id_event(backend: Backend) -> None:
    m = backend.manager
    log = EventLog()
    registration = m.event_publisher.subscribe(log)
    await m.event_publisher.wait_ready()
    task_id = await held_task(m)  # 1 (the claim that runs it changes nothing seen)
    await m.mark_working(task_id, "started")  # 2
    await m.mark_working(task_id, "started")  # no change: no event
    await m.request_input(task_id, {"a": ELICIT, "b": ROOTS})  # 3
    await update(m, task_id, {"a": ELICIT_ANSWER})  # 4
    await update(m, task_id, {"zzz": ELICIT_ANSWER})  # ignored: no event
    await m.take_input_responses(task_id)  # nothing visible changed: no event
    await m.request_cancellation(TaskRequestContext(ALICE, task_id))  # 5
    await m.request_cancellation(TaskRequestContext(ALICE, task_id))  # already: no event
    await m.complete_task(task_id, RESULT)  # 6
    await log.wait_for(task_id, 6)
    marker = await new_task(m)
    await log.wait_for(marker, 1)
    assert log.count(task_id) == 6
    registration.close()
    registration.close()  # idempotent
    late = await new_task(m)
    marker = await new_task(m)
    other = EventLog()
    with m.event_publisher.subscribe(other):
        await m.event_publisher.publish_task_changed(marker)
        await other.wait_for(marker, 1)
    assert late not in log.ids


async def test_a_listener_that_raises_does_not_stop_the_others(backend: Backend) -> None:
    m = backend.manager
    calls: list[str] = []

    def broken(task_id: str) -> None:
        calls.append(task_id)
        raise RuntimeError("listener bug")

    async def asynchronous(task_id: str) -> None:
        calls.append("async:" + task_id)

    log = EventLog()
    with (
        m.event_publisher.subscribe(broken),
        m.event_publisher.subscribe(asynchronous),
        m.event_publisher.subscribe(log),
    ):
        await m.event_publisher.wait_ready()
        task_id = await new_task(m)
        await log.wait_for(task_id, 1)

        async def async_ran() -> bool:
            return "async:" + task_id in calls

        await wait_until(async_ran)
    assert task_id in calls
