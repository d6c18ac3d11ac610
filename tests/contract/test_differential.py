"""Differential test: the in-memory reference and the Redis backend agree step for step.

A hypothesis ``RuleBasedStateMachine`` drives random sequences of every
``TaskManager`` operation against an :class:`InMemoryTaskManager` and a
:class:`RedisTaskManager` on the session's real redis-server (a fresh key prefix
per example) and asserts that both give the same observable result after every
step, and that each task looks the same on both between steps.

What is compared
    The *observable result* of an operation: its return value, or the type and
    message of the library exception it raised. Each backend generates its own
    task IDs, so a logical task is a :class:`Pair` of IDs and a ``Task`` snapshot
    is compared without ``taskId``: its ``to_wire()`` form without the two
    timestamps, its ``model_dump()`` without ID, timestamps and origin, and the
    origin's ``to_persisted_string()`` (byte-for-byte storage). The timestamps
    come from different clocks, so instead each backend is checked on its own:
    ``created_at <= last_updated_at``, ``created_at`` never changes and
    ``last_updated_at`` never goes backwards for a task. Unknown, malformed and
    unauthorized IDs must all give ``None`` / ``TaskNotFoundError("task not
    found")`` on both. After every step an invariant re-finds every task on both
    backends with its creator's context, compares ``is_cancellation_requested``
    (unfenced: it has no side effect), checks the fence mirror (below), and
    checks that no key of the prefix lacks an expiry other than the partition
    streams (``Backend.immortal_keys``).

How the clock is modelled
    ``advance_clock`` moves time forward by D ms on both backends without
    sleeping. The reference's clock is ``time.time()`` plus an offset, so D is
    added to the offset. Redis expires keys on its own clock, which a test cannot
    move, so the rule emulates the move by bringing every absolute server-clock
    deadline of the prefix D ms closer instead: each key's ``PEXPIRETIME`` becomes
    ``PEXPIRETIME - D`` (``PEXPIREAT`` in the past deletes the key at once, as an
    expiry would), and in each task record the expiry (``ex``, which later
    companion keys get as their ``PEXPIREAT``) and lease deadline (``ld``) fields
    shift by D too. Stored ``ca``/``ua`` timestamps are left alone: they are not
    compared across backends, and shifting them would fake a backwards step.
    Real time still passes (a few hundred ms per example), so every TTL and lease
    is an odd multiple of 5 s while every advance is a multiple of 10 s: no
    deadline is ever within 5 s of "now" when a step looks at it, and both
    backends see each expiry at the same step.

How fences and claims are modelled
    Both backends have a work queue (``manager.work_queue``), so the lease rules
    (``claim_task``, ``claim_next``, ``release``, ``renew``) run on both and their
    outcomes are compared like any other operation's. Each backend takes a new
    fence from its own clock (ms x 1024 above the old fence), so the two fences of
    a task are different numbers: a :class:`Pair` keeps each backend's current
    fence and the ones later claims or releases superseded, and a worker operation
    gets the same *kind* of ``fence=`` on both (``None``, the current fence, or a
    stale one: the last superseded, else one never issued). A claim must agree on
    both in outcome, attempt, origin and payload and in whether it raised the
    fence (a fresh claim) or handed it back (the holder's retry within its lease);
    the rule also checks that the outcome fits the reference's state before the
    claim (an expired task only when the reference lost it too, a terminal one
    only when it is terminal there, cancellation only when intent is recorded
    there, a fresh fence only then not). An invariant checks each backend's stored
    ``fn`` against the fence the pair holds for it.

How trace context is modelled
    The library's hooks are bound to an SDK tracer provider whose ID generator
    hands out IDs the rule chose, the same to both backends' ``create_task``: so
    both store the same W3C context, under a drawn parent (none, a client's with or
    without a ``tracestate``, one long enough to be kept in pieces, or an unsampled
    one, which stores nothing). Every claim that runs the task must return exactly
    that context on both; an invariant checks that a record holds it (``tp`` and
    its pieces) exactly while the task is live, on both.

Steering and determinism
    Four rules pick their task from the reference's state rather than at random,
    since random draws rarely reach the states they need: ``answer_outstanding``
    answers a task that waits for input (right or wrong variants),
    ``reissue_round`` repeats an earlier round on a live task,
    ``take_accepted_answers`` takes from a task holding answers, and
    ``claim_after_intent`` claims a task whose cancellation was requested.
    Task IDs are random, but which partition a task lands in decides what
    ``claim_next`` reads, so that partition is drawn and the ID generator is
    patched during ``create_task`` to use it, on both backends: the same tasks
    share a stream on both, and a replayed example runs identically.

Task-manager events are not compared: delivery is best effort and asynchronous
by contract. Each step labels its outcome with ``hypothesis.event`` (to count
coverage). ``RT_DIFFERENTIAL_EXAMPLES`` overrides the number of examples (100).
"""

from __future__ import annotations

import asyncio
import os
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator

from redis_tasks import (
    ClaimOutcome,
    InMemoryTaskManager,
    InputRequest,
    JsonRpcError,
    Limits,
    RedisTaskManager,
    RedisTasksError,
    RequestContext,
    Task,
    TaskManager,
    TaskOrigin,
    TaskRequestContext,
    TaskUpdateContext,
)
from redis_tasks import _base as base_module
from redis_tasks._ids import new_task_id, parse_task_id
from redis_tasks._lease import Claim
from redis_tasks._status import TERMINAL_STATUSES
from redis_tasks._telemetry.spans import decode_context
from redis_tasks._telemetry.traces import TRACES
from redis_tasks._work_queue import WorkEntry, WorkQueue
from redis_tasks.testing import RedisServer
from tests.support.backends import Backend
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
)

T = TypeVar("T")

#: Few partitions, so ``claim_next`` finds several tasks in one stream.
PARTITIONS = 2
#: A quota and a cap low enough that sequences meet them: refused creates and
#: deferred claims must agree too. (The test places each task in a drawn partition,
#: not its tenant's home one: both backends then count per tenant and partition.)
LIMITS = Limits(max_open_tasks_per_tenant=6, max_running_tasks_per_tenant=2)
#: Who a task counts against: its binding (the default), or a named tenant.
TENANTS = (None, "org:acme")
WEIGHTS = (1, 3)
#: Examples per run; raise it (e.g. to 300) to shake out rarer divergences.
MAX_EXAMPLES = int(os.environ.get("RT_DIFFERENTIAL_EXAMPLES", "100"))

# Arguments are drawn as names, so a failing sequence prints readably (a
# RequestContext's repr hides its partition key, so ALICE and BOB look alike).
CONTEXTS: dict[str, RequestContext] = {
    "alice": ALICE,
    "bob": BOB,
    "anonymous": ANONYMOUS,
    "other-endpoint": OTHER_ENDPOINT,
}
ORIGINS: dict[str, TaskOrigin] = {
    "plain": ORIGIN,
    # Odd whitespace and a trailing zero: stored and returned byte for byte.
    "odd": TaskOrigin.from_persisted_string('  {"b": 1, "a": [2.50, null]}\n'),
}
METADATA: dict[str, dict[str, Any] | None] = {
    "none": None,
    "empty": {},
    "tenant": {"tenant": "acme", "n": [1, 2.5]},
}
REQUESTS: dict[str, InputRequest] = {
    "elicit": ELICIT,
    "sample": SAMPLE,
    "roots": ROOTS,
    # Same method as "elicit", different params: reusing a key for it is refused.
    "elicit-other": InputRequest(method="elicitation/create", params={"message": "Other?"}),
}
ANSWERS: dict[str, Any] = {
    "elicit": ELICIT_ANSWER,
    "decline": {"action": "decline"},
    "sample": SAMPLE_ANSWER,
    "roots": ROOTS_ANSWER,
    "no-variant": {"roots": "nope"},  # answers no request variant: always ignored
}
RESULTS: dict[str, dict[str, Any]] = {
    "done": {"content": [{"type": "text", "text": "done"}], "isError": False},
    "is-error": {"content": [{"type": "text", "text": "bad input"}], "isError": True},
}
ERRORS: dict[str, JsonRpcError] = {
    "rate-limit": JsonRpcError(code=-32603, message="API rate limit", data={"retry": 3}),
    "plain": JsonRpcError(code=-32000, message="x"),
}
#: Status messages; the empty one is a message, distinct from none.
MESSAGES = (None, "", "waiting", "ünïcødé ✓")
INPUT_KEYS = ("a", "b", "c")
#: Keys a client may answer: the issued ones and one never issued.
ANSWER_KEYS = (*INPUT_KEYS, "zz")

# Time. Every TTL and lease is an odd multiple of 5 s and every advance a multiple
# of 10 s, so a deadline is always at least 5 s from "now" (minus the real time an
# example takes) when a step looks at it: both backends agree on every expiry.
LONG_TTL_S = 3600  # the default; never reached: 30 steps advance at most 600 s
SHORT_TTLS_S = (5, 15, 25)
ADVANCES_MS = (10_000, 20_000)
LEASES_MS = (5_000, 15_000)
#: Deliveries a worker allows (drawn per claim): low, so re-claims after expired
#: leases reach the poison outcome.
MAX_ATTEMPTS = (1, 2, 3)
CONSUMERS = ("w1", "w2")
FENCE_KINDS = ("none", "good", "stale")
BACKENDS = ("memory", "redis")

#: The span context current when a task is created: none (the creating span is a
#: root), a client's, or a client's that was not sampled (nothing is stored then).
#: With a tracestate the context is longer than 64 bytes: Redis keeps it in pieces.
CLIENT_TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
TRACE_PARENTS: dict[str, tuple[bool, list[tuple[str, str]]] | None] = {
    "root": None,
    "client": (True, []),
    "client-tracestate": (True, [("rojo", "00f067aa0ba902b7"), ("congo", "t61rcWkgMzE")]),
    "client-long-tracestate": (True, [(f"vendor{i}", "v" * 40) for i in range(6)]),
    "unsampled": (False, []),
}

#: Well-formed IDs of no task (one in a partition the managers never use) and
#: malformed ones: every operation must find nothing, the same way on both.
BOGUS_IDS = (
    "0." + "A" * 24,
    "1." + "B" * 24,
    "7." + "C" * 24,
    "",
    "x",
    "1.AAAA",
    "99999." + "A" * 24,
    "0." + "A" * 23 + "*",
)

Outcome = tuple[Any, ...]
NOT_FOUND: Outcome = ("raised", "TaskNotFoundError", "task not found")
NOTHING: Outcome = ("returned", None)
_TERMINAL = frozenset(status.value.encode() for status in TERMINAL_STATUSES)
#: A task's record hash (its companion keys have one more ``:suffix``).
_RECORD_KEY = re.compile(r":task:[^:]+$")
#: Sorted sets scored by a server-clock deadline: a tenant's open and run sets, the
#: parked tenants.
_DEADLINE_SCORES = re.compile(r":(open|run):[^:]+$|:parked$")


@dataclass(eq=False, repr=False)
class Pair:
    """One logical task: its ID on each backend and what the test knows about it.

    ``known`` is false for the bogus IDs, which name the same (absent) task on both.
    """

    index: int
    memory_id: str
    redis_id: str
    owner: str = "alice"
    origin: str = "plain"
    payload: bytes = b""
    known: bool = True
    #: Per backend, the current fence (a different number on each: see the module
    #: docstring).
    fence: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BACKENDS, 0))
    #: Per backend, fences later claims or releases replaced: what a zombie worker
    #: would present.
    superseded: dict[str, list[int]] = field(
        default_factory=lambda: {backend: [] for backend in BACKENDS}
    )
    #: The span context the task was created under (a TRACE_PARENTS name), and the IDs
    #: its creating span got: the context both backends must store.
    parent: str = "root"
    span_ids: tuple[int, int] = (0, 0)
    #: Every input round asked (request names, message), for identical re-issues.
    rounds: list[tuple[dict[str, str], str | None]] = field(default_factory=list)
    #: Per backend, the last (created_at, last_updated_at) seen.
    times: dict[str, tuple[datetime, datetime]] = field(default_factory=dict)

    def __repr__(self) -> str:
        # The name hypothesis gives the bundle value, so printed steps read as code.
        return f"tasks_{self.index}" if self.known else f"bogus({self.memory_id!r})"

    def id_on(self, backend: str) -> str:
        """This task's ID on ``backend`` ("memory" or "redis")."""
        return self.memory_id if backend == "memory" else self.redis_id

    def fence_for(self, kind: str, backend: str) -> int | None:
        """The ``fence=`` argument of kind "none", "good" or "stale" on ``backend``."""
        if kind == "none":
            return None
        return self.lease_fence(kind == "stale", backend)

    def lease_fence(self, stale: bool, backend: str) -> int:
        """The current fence on ``backend``, or a stale one: the last superseded, else
        one never issued."""
        current = self.fence[backend]
        if not stale:
            return current
        superseded = self.superseded[backend]
        return superseded[-1] if superseded else current + 1

    def supersede(self, backend: str, fence: int) -> None:
        """A claim or release on ``backend`` made ``fence`` the current fence."""
        self.superseded[backend].append(self.fence[backend])
        self.fence[backend] = fence


class ChosenIds(IdGenerator):
    """An SDK ID generator that hands out the IDs a rule chose (the same to both backends)."""

    def __init__(self) -> None:
        self.trace_id = 1
        self.span_id = 1

    def generate_span_id(self) -> int:
        return self.span_id

    def generate_trace_id(self) -> int:
        return self.trace_id


def client_span(parent: str) -> trace.Span | None:
    """The client's span a ``TRACE_PARENTS`` entry names, as the MCP SDK makes it from
    a request's ``_meta`` (``None``: no parent)."""
    spec = TRACE_PARENTS[parent]
    if spec is None:
        return None
    sampled, state = spec
    flags = trace.TraceFlags(trace.TraceFlags.SAMPLED if sampled else 0)
    context = trace.SpanContext(
        CLIENT_TRACE_ID, 0x00F067AA0BA902B7, True, flags, trace.TraceState(state)
    )
    return trace.NonRecordingSpan(context)


def bogus(task_id: str) -> Pair:
    """A pair naming no task: the same ID on both backends."""
    return Pair(-1, task_id, task_id, known=False)


def snapshot(task: Task) -> dict[str, Any]:
    """Everything observable in ``task`` except its ID and timestamps."""
    wire = task.to_wire()
    for name in ("taskId", "createdAt", "lastUpdatedAt"):
        del wire[name]
    return {
        "wire": wire,
        "model": task.model_dump(exclude={"task_id", "created_at", "last_updated_at", "origin"}),
        "origin": task.origin.to_persisted_string(),
    }


def answer_for(request: InputRequest, how: str) -> Any:
    """An answer to ``request``: of its variant ("accept"; "decline" for an
    elicitation), or of another variant ("wrong", which must be ignored)."""
    if how == "wrong":
        return ELICIT_ANSWER if request.method != "elicitation/create" else ROOTS_ANSWER
    if request.method == "sampling/createMessage":
        return SAMPLE_ANSWER
    if request.method == "roots/list":
        return ROOTS_ANSWER
    return ANSWERS["decline"] if how == "decline" else ELICIT_ANSWER


def placed_in(partition: int) -> Callable[[int, int | None], str]:
    """A task-ID generator like ``new_task_id`` that always picks ``partition``."""

    def generate(_partitions: int, _home: int | None = None) -> str:
        return f"{partition}.{new_task_id(1).split('.', 1)[1]}"

    return generate


def finder(ctx: RequestContext) -> Callable[[TaskManager, str], Awaitable[Task | None]]:
    """A call of ``find_task`` as ``ctx``, for :meth:`MemoryVersusRedis.both`."""
    return lambda m, task_id: m.find_task(TaskRequestContext(ctx, task_id))


async def attempt(call: Awaitable[Any]) -> Outcome:
    """Await ``call``: ``("returned", value)`` or ``("raised", type name, message)``.

    Only the library's own errors are outcomes; anything else is a bug and fails.
    """
    try:
        return ("returned", await call)
    except RedisTasksError as exc:
        return ("raised", type(exc).__name__, str(exc))


async def attempt_all(calls: list[Awaitable[Any]]) -> list[Outcome]:
    """:func:`attempt` each of ``calls`` concurrently (inside the running loop)."""
    return list(await asyncio.gather(*(attempt(call) for call in calls)))


def label(outcome: Outcome) -> str:
    """A short name for ``outcome``, for ``hypothesis.event``."""
    if outcome[0] == "raised":
        return str(outcome[1])
    value = outcome[1]
    if isinstance(value, dict) and "wire" in value:
        return f"task {value['wire']['status']}"
    if isinstance(value, dict):
        return "answers" if value else "no answers"
    return repr(value)


class MemoryVersusRedis(RuleBasedStateMachine):
    """Runs each operation on both backends and compares what they return."""

    tasks: Bundle[Pair] = Bundle("tasks")
    #: Mostly real tasks, sometimes an unknown or malformed ID.
    targets = st.one_of(tasks, tasks, tasks, tasks, st.sampled_from(BOGUS_IDS).map(bogus))

    def __init__(self, url: str) -> None:
        super().__init__()
        # Hypothesis machines are synchronous: one private event loop runs every
        # coroutine of this example, so both managers' connections live on it.
        self.loop = asyncio.new_event_loop()
        self.offset_ms = 0
        self.prefix = f"d{uuid.uuid4().hex[:12]}"
        self.memory = InMemoryTaskManager(
            limits=LIMITS, partitions=PARTITIONS, clock=self._memory_clock
        )
        self.redis = RedisTaskManager.from_url(
            url, prefix=self.prefix, partitions=PARTITIONS, limits=LIMITS, cluster=False
        )
        self.store = Backend("redis", self.redis, self.prefix)
        self.ids = ChosenIds()
        # The default sampler (parent-based, else always on): a client's unsampled
        # context makes an unrecorded span, which stores nothing.
        self.tracer_provider = TracerProvider(id_generator=self.ids)
        self.saved_traces = dict(vars(TRACES))
        TRACES.enable(self.tracer_provider)
        self.pairs: list[Pair] = []
        self.by_id: dict[str, dict[str, Pair]] = {backend: {} for backend in BACKENDS}
        self.run(self.memory.__aenter__())
        self.run(self.redis.__aenter__())

    def _memory_clock(self) -> float:
        """Real time plus the emulated advance, so timestamps stay plausible."""
        return time.time() + self.offset_ms / 1000

    def run(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` on this machine's loop."""

        async def wrapped() -> T:
            return await awaitable

        return self.loop.run_until_complete(wrapped())

    def teardown(self) -> None:
        """Delete the prefix's keys, close both managers and the loop; unbind the hooks."""
        vars(TRACES).clear()
        vars(TRACES).update(self.saved_traces)
        try:
            keys = self.run(self.store.all_keys())
            if keys:
                self.run(self.redis.client.delete(*keys))
        finally:
            try:
                self.run(self.redis.__aexit__(None, None, None))
                self.run(self.memory.__aexit__(None, None, None))
                # The auto-pipeline's sends may still be returning their connection.
                pending = asyncio.all_tasks(self.loop)
                if pending:
                    self.run(asyncio.wait(pending, timeout=5))
            finally:
                self.loop.close()

    # -- running an operation on both -------------------------------------------------

    def outcome(self, pair: Pair, backend: str, call: Awaitable[Any]) -> Outcome:
        """The observable result of ``call`` on ``backend``: value, or error type and text."""
        return self.comparable(pair, backend, self.run(attempt(call)))

    def comparable(self, pair: Pair, backend: str, outcome: Outcome) -> Outcome:
        """``outcome`` with a returned task replaced by its comparable part."""
        if outcome[0] == "returned" and isinstance(outcome[1], Task):
            return ("returned", self.observe(pair, backend, outcome[1]))
        return outcome

    def observe(self, pair: Pair, backend: str, task: Task) -> dict[str, Any]:
        """Check ``task``'s ID and timestamps on ``backend``; return its comparable part."""
        assert pair.known, f"{backend} returned a task for {pair!r}"
        assert task.task_id == pair.id_on(backend)
        created, updated = task.created_at, task.last_updated_at
        assert created <= updated, f"{backend}: updated before created"
        seen = pair.times.get(backend)
        if seen is not None:
            assert created == seen[0], f"{backend}: created_at changed"
            assert updated >= seen[1], f"{backend}: last_updated_at went backwards"
        pair.times[backend] = (created, updated)
        return snapshot(task)

    def both(
        self, what: str, pair: Pair, call: Callable[[TaskManager, str], Awaitable[Any]]
    ) -> Outcome:
        """Run ``call`` on each backend with the pair's ID there; both must agree.

        ``what`` names the operation in the ``hypothesis.event`` labelling the outcome.
        """
        memory = self.outcome(pair, "memory", call(self.memory, pair.memory_id))
        redis = self.outcome(pair, "redis", call(self.redis, pair.redis_id))
        assert memory == redis, f"backends disagree on {pair!r}:\n memory {memory}\n redis  {redis}"
        event(f"{what}: {label(memory)}")
        return memory

    def backend_of(self, m: TaskManager) -> str:
        """The name of the backend ``m`` is ("memory" or "redis")."""
        return "memory" if m is self.memory else "redis"

    def fences(self, pair: Pair, kind: str) -> Callable[[TaskManager], int | None]:
        """The pair's ``fence=`` argument of ``kind``, for each backend's manager."""
        return lambda m: pair.fence_for(kind, self.backend_of(m))

    def queue_of(self, m: TaskManager) -> WorkQueue:
        """The work queue of ``m``, one of the two managers."""
        return self.memory.work_queue if m is self.memory else self.redis.work_queue

    def context(self, pair: Pair, who: str) -> RequestContext:
        """The request context named ``who`` ("owner": the pair's creator)."""
        return CONTEXTS[pair.owner if who == "owner" else who]

    def expect_hidden(self, pair: Pair, who: str, outcome: Outcome, hidden: Outcome) -> None:
        """Unknown, malformed and unauthorized look exactly alike: ``hidden``."""
        if not pair.known or self.context(pair, who) != CONTEXTS[pair.owner]:
            assert outcome == hidden, f"{pair!r} seen by {who}: {outcome}"

    def record_key(self, pair: Pair) -> str:
        """The Redis key of the pair's task record."""
        partition = parse_task_id(pair.redis_id)
        assert partition is not None
        return self.redis.keyspace.task(partition, pair.redis_id).task

    # -- creation ---------------------------------------------------------------------

    def create(
        self,
        partition: int,
        owner: str,
        origin: str,
        payload: bytes,
        ttl_s: int,
        poll_ms: int | None,
        metadata: str,
        parent: str = "root",
        tenant: str | None = None,
        weight: int = 1,
    ) -> Pair | None:
        """Create one task on each backend with the same arguments, under the same
        span context with the same span IDs; ``None`` when both refused it alike (a
        tenant's quota)."""

        def call(m: TaskManager) -> Awaitable[Task]:
            return m.create_task(
                CONTEXTS[owner],
                ORIGINS[origin],
                payload=payload,
                ttl=timedelta(seconds=ttl_s),
                poll_interval=None if poll_ms is None else timedelta(milliseconds=poll_ms),
                metadata=METADATA[metadata],
                tenant=tenant,
                weight=weight,
            )

        # Task IDs are random; the partition a task lands in decides which
        # claim_next reads it, so it is drawn instead (replays must be identical).
        index = len(self.pairs)
        span_ids = (0x10000 + index, 0x100 + index)
        self.ids.trace_id, self.ids.span_id = span_ids
        client = client_span(parent)
        with mock.patch.object(base_module, "new_task_id", placed_in(partition)):
            if client is None:
                outcomes = [self.run(attempt(call(m))) for m in (self.memory, self.redis)]
            else:
                with trace.use_span(client):
                    outcomes = [self.run(attempt(call(m))) for m in (self.memory, self.redis)]
        if outcomes[0][0] == "raised" or outcomes[1][0] == "raised":
            assert outcomes[0] == outcomes[1], f"create: memory {outcomes[0]}, redis {outcomes[1]}"
            event(f"create_task refused: {outcomes[0][1]}")
            return None
        memory_task, redis_task = outcomes[0][1], outcomes[1][1]
        for task in (memory_task, redis_task):
            assert parse_task_id(task.task_id) == partition
            assert task.created_at == task.last_updated_at
        pair = Pair(
            index,
            memory_task.task_id,
            redis_task.task_id,
            owner=owner,
            origin=origin,
            payload=payload,
            parent=parent,
            span_ids=span_ids,
        )
        assert self.observe(pair, "memory", memory_task) == self.observe(pair, "redis", redis_task)
        self.pairs.append(pair)
        self.by_id["memory"][pair.memory_id] = pair
        self.by_id["redis"][pair.redis_id] = pair
        event(f"create_task: ttl {ttl_s} s, trace parent {parent}, tenant {tenant}")
        return pair

    @initialize(target=tasks)
    def first_task(self) -> Pair:
        """Every example starts with a task, so ``tasks`` is never empty."""
        pair = self.create(0, "alice", "plain", b"work", LONG_TTL_S, None, "none")
        assert pair is not None
        return pair

    @initialize(target=tasks)
    def short_lived_task(self) -> Pair:
        """And with one that the first clock advances expire."""
        pair = self.create(1, "anonymous", "odd", b"", 15, 250, "tenant", "client-long-tracestate")
        assert pair is not None
        return pair

    @rule(
        target=tasks,
        partition=st.integers(0, PARTITIONS - 1),
        owner=st.sampled_from(sorted(CONTEXTS)),
        origin=st.sampled_from(sorted(ORIGINS)),
        payload=st.sampled_from((b"", b"work")),
        ttl_s=st.sampled_from((LONG_TTL_S, *SHORT_TTLS_S)),
        poll_ms=st.sampled_from((None, 250)),
        metadata=st.sampled_from(sorted(METADATA)),
        parent=st.sampled_from(sorted(TRACE_PARENTS)),
        tenant=st.sampled_from(TENANTS),
        weight=st.sampled_from(WEIGHTS),
    )
    def create_task(
        self,
        partition: int,
        owner: str,
        origin: str,
        payload: bytes,
        ttl_s: int,
        poll_ms: int | None,
        metadata: str,
        parent: str,
        tenant: str | None,
        weight: int,
    ) -> Pair | MultipleResults[Pair]:
        """``create_task`` with any context, origin, payload, TTL, poll interval,
        metadata, span context, tenant and weight."""
        pair = self.create(
            partition, owner, origin, payload, ttl_s, poll_ms, metadata, parent, tenant, weight
        )
        return multiple() if pair is None else pair

    # -- client-facing ----------------------------------------------------------------

    #: Half the time the owner, else any context (the owner's included).
    who = st.one_of(st.just("owner"), st.sampled_from(sorted(CONTEXTS)))

    @rule(pair=targets, who=who)
    def find_task(self, pair: Pair, who: str) -> None:
        """``find_task`` as the owner, another context, or for a bogus ID."""
        outcome = self.both("find_task", pair, finder(self.context(pair, who)))
        self.expect_hidden(pair, who, outcome, NOTHING)

    @rule(
        pair=targets,
        who=who,
        answers=st.dictionaries(
            st.sampled_from(ANSWER_KEYS), st.sampled_from(sorted(ANSWERS)), max_size=3
        ),
    )
    def update_task(self, pair: Pair, who: str, answers: dict[str, str]) -> None:
        """``update_task`` with matching, wrong-variant, unknown or answered keys."""
        ctx = self.context(pair, who)
        responses = {key: ANSWERS[name] for key, name in answers.items()}
        outcome = self.both(
            "update_task", pair, lambda m, i: m.update_task(TaskUpdateContext(ctx, i, responses))
        )
        self.expect_hidden(pair, who, outcome, NOT_FOUND)

    def steer(self, which: int, wanted: Callable[[Pair, Task], bool]) -> Pair:
        """The ``which``-th task (cyclically) of those the reference shows ``wanted``,
        else of all tasks: rules that need a task in a particular state find one."""
        candidates = []
        for pair in self.pairs:
            ctx = TaskRequestContext(CONTEXTS[pair.owner], pair.memory_id)
            task = self.run(self.memory.find_task(ctx))
            if task is not None and wanted(pair, task):
                candidates.append(pair)
        pair = (candidates or self.pairs)[which % len(candidates or self.pairs)]
        note(f"steered to {pair!r}")
        return pair

    @rule(
        which=st.integers(0, 15),
        pick=st.integers(0, 7),
        how=st.sampled_from(("accept", "decline", "wrong")),
    )
    def answer_outstanding(self, which: int, pick: int, how: str) -> None:
        """``update_task`` by the owner answering some outstanding requests.

        Random answers rarely hit an outstanding key, so this rule picks a task
        waiting for input, reads its outstanding requests off the reference and
        answers the subset ``pick`` selects (bit ``n``: the ``n``-th key; none: the
        first), with answers of the right variant or (``how="wrong"``) another one.
        """
        pair = self.steer(which, lambda _, task: bool(task.input_requests))
        ctx = CONTEXTS[pair.owner]
        task = self.run(self.memory.find_task(TaskRequestContext(ctx, pair.memory_id)))
        outstanding = sorted(task.input_requests.items()) if task is not None else []
        chosen = [item for n, item in enumerate(outstanding) if pick >> n & 1]
        responses: dict[str, Any] = {"a": ELICIT_ANSWER}  # no request: ignored on both
        if outstanding:
            responses = {
                key: answer_for(request, how) for key, request in chosen or outstanding[:1]
            }
            event(f"answer_outstanding: {how} {len(responses)} of {len(outstanding)}")
        self.both(
            "answer_outstanding",
            pair,
            lambda m, i: m.update_task(TaskUpdateContext(ctx, i, responses)),
        )

    @rule(pair=targets, who=who)
    def request_cancellation(self, pair: Pair, who: str) -> None:
        """``request_cancellation`` as the owner, another context, or for a bogus ID."""
        ctx = self.context(pair, who)
        outcome = self.both(
            "request_cancellation",
            pair,
            lambda m, i: m.request_cancellation(TaskRequestContext(ctx, i)),
        )
        self.expect_hidden(pair, who, outcome, NOT_FOUND)

    # -- worker operations (each with no fence, the current one, or a stale one) -----

    message = st.sampled_from(MESSAGES)
    #: The current fence half the time: most worker writes should get through.
    fence_kind = st.one_of(st.just("good"), st.sampled_from(FENCE_KINDS))

    @rule(pair=targets, message=message, fence_kind=fence_kind)
    def mark_working(self, pair: Pair, message: str | None, fence_kind: str) -> None:
        """``mark_working``."""
        fence = self.fences(pair, fence_kind)
        self.both("mark_working", pair, lambda m, i: m.mark_working(i, message, fence=fence(m)))

    def ask(self, pair: Pair, names: dict[str, str], message: str | None, fence_kind: str) -> None:
        """``request_input`` with the named requests; remember the round when accepted."""
        requests = {key: REQUESTS[name] for key, name in names.items()}
        fence = self.fences(pair, fence_kind)
        outcome = self.both(
            "request_input",
            pair,
            lambda m, i: m.request_input(i, requests, message, fence=fence(m)),
        )
        if outcome[0] == "returned":
            pair.rounds.append((names, message))

    @rule(
        pair=targets,
        names=st.dictionaries(
            st.sampled_from(INPUT_KEYS), st.sampled_from(sorted(REQUESTS)), min_size=1, max_size=3
        ),
        message=message,
        fence_kind=fence_kind,
    )
    def request_input(
        self, pair: Pair, names: dict[str, str], message: str | None, fence_kind: str
    ) -> None:
        """``request_input`` with new keys, reused keys (maybe for another request)."""
        self.ask(pair, names, message, fence_kind)

    @rule(
        which=st.integers(0, 15),
        back=st.integers(0, 3),
        restated=st.one_of(st.just("same"), message),
        fence_kind=fence_kind,
    )
    def reissue_round(self, which: int, back: int, restated: str | None, fence_kind: str) -> None:
        """``request_input`` repeating an earlier round on a live task (a handler
        re-run), with its message or another one: a no-op while outstanding and
        unchanged, recorded answers once answered."""
        pair = self.steer(which, lambda p, task: bool(p.rounds) and not task.is_terminal)
        if pair.rounds:
            names, message = pair.rounds[-1 - back % len(pair.rounds)]
        else:
            names, message = {"a": "elicit"}, None
        self.ask(pair, names, message if restated == "same" else restated, fence_kind)

    @rule(pair=targets, fence_kind=fence_kind)
    def take_input_responses(self, pair: Pair, fence_kind: str) -> None:
        """``take_input_responses``."""
        fence = self.fences(pair, fence_kind)
        self.both(
            "take_input_responses", pair, lambda m, i: m.take_input_responses(i, fence=fence(m))
        )

    @rule(which=st.integers(0, 15), fence_kind=fence_kind)
    def take_accepted_answers(self, which: int, fence_kind: str) -> None:
        """``take_input_responses`` on a task holding accepted answers not yet taken
        (a re-issued round consumes them too, so random picks rarely find any)."""

        def holds_answers(pair: Pair, _: Task) -> bool:
            record = self.memory._live(pair.memory_id)  # read-only look at the reference
            return record is not None and bool(record.answers)

        pair = self.steer(which, holds_answers)
        fence = self.fences(pair, fence_kind)
        self.both(
            "take_input_responses", pair, lambda m, i: m.take_input_responses(i, fence=fence(m))
        )

    @rule(
        pair=targets,
        result=st.sampled_from(sorted(RESULTS)),
        message=message,
        fence_kind=fence_kind,
    )
    def complete_task(self, pair: Pair, result: str, message: str | None, fence_kind: str) -> None:
        """``complete_task`` (a repeat of the same completion is accepted)."""
        fence = self.fences(pair, fence_kind)
        value = RESULTS[result]
        self.both(
            "complete_task", pair, lambda m, i: m.complete_task(i, value, message, fence=fence(m))
        )

    @rule(
        pair=targets,
        error=st.sampled_from(sorted(ERRORS)),
        message=message,
        fence_kind=fence_kind,
    )
    def fail_task(self, pair: Pair, error: str, message: str | None, fence_kind: str) -> None:
        """``fail_task`` with a JSON-RPC error."""
        fence = self.fences(pair, fence_kind)
        value = ERRORS[error]
        self.both("fail_task", pair, lambda m, i: m.fail_task(i, value, message, fence=fence(m)))

    @rule(pair=targets, message=message, fence_kind=fence_kind)
    def cancel_task(self, pair: Pair, message: str | None, fence_kind: str) -> None:
        """``cancel_task``."""
        fence = self.fences(pair, fence_kind)
        self.both("cancel_task", pair, lambda m, i: m.cancel_task(i, message, fence=fence(m)))

    @rule(pair=targets, fence_kind=fence_kind)
    def is_cancellation_requested(self, pair: Pair, fence_kind: str) -> None:
        """``is_cancellation_requested``."""
        fence = self.fences(pair, fence_kind)
        self.both(
            "is_cancellation_requested",
            pair,
            lambda m, i: m.is_cancellation_requested(i, fence=fence(m)),
        )

    # -- the clock --------------------------------------------------------------------

    @rule(ms=st.sampled_from(ADVANCES_MS))
    def advance_clock(self, ms: int) -> None:
        """Move both backends' clocks forward by ``ms`` (see the module docstring)."""
        self.offset_ms += ms
        self.run(self.advance_redis(ms))
        event(f"advance_clock: {ms} ms")

    async def advance_redis(self, ms: int) -> None:
        """Bring every server-clock deadline under the prefix ``ms`` closer: key
        expiries, the records' expiry and lease deadline, and the scores of the sorted
        sets that hold deadlines (a tenant's open and run sets, the parked tenants)."""
        keys = await self.store.all_keys()
        scored = [key for key in keys if _DEADLINE_SCORES.search(key)]
        async with self.redis.client.pipeline(transaction=False) as pipe:
            for key in scored:
                pipe.zrange(key, 0, -1, withscores=True)
            members = await pipe.execute()
        async with self.redis.client.pipeline(transaction=False) as pipe:
            for key, pairs in zip(scored, members, strict=True):
                finite = {m: score - ms for m, score in pairs if score != float("inf")}
                if finite:
                    pipe.zadd(key, finite, xx=True)
            await pipe.execute()
        records = [key for key in keys if _RECORD_KEY.search(key)]
        async with self.redis.client.pipeline(transaction=False) as pipe:
            for key in records:
                pipe.hmget(key, ["ex", "ld"])
            for key in keys:
                pipe.pexpiretime(key)
            replies = await pipe.execute()
        deadlines = dict(zip(records, replies[: len(records)], strict=True))
        async with self.redis.client.pipeline(transaction=False) as pipe:
            for key, expire_at in zip(keys, replies[len(records) :], strict=True):
                if key in deadlines:
                    # The fields first: after a PEXPIREAT in the past deleted the
                    # key, HSET would recreate it without an expiry.
                    shifted = {
                        name: int(value) - ms
                        for name, value in zip(("ex", "ld"), deadlines[key], strict=True)
                        if value is not None
                    }
                    if shifted:
                        pipe.hset(key, mapping=shifted)  # type: ignore[arg-type]
                if expire_at > 0:  # the partition streams have none (-1)
                    pipe.pexpireat(key, expire_at - ms)
            await pipe.execute()

    # -- leases (each backend's work queue) -------------------------------------------

    def before_claim(self, pair: Pair) -> tuple[bool, bool, bool]:
        """What the reference holds of ``pair`` before a claim: whether the task is
        live, terminal, and whether its cancellation was requested."""
        record = self.memory._live(pair.memory_id)  # read-only look at the reference
        if record is None:
            return False, False, False
        return True, record.fields["st"] in _TERMINAL, record.fields.get("cx") == b"1"

    def check_claims(
        self, pair: Pair, before: tuple[bool, bool, bool], claims: dict[str, Claim]
    ) -> None:
        """Both backends' claims of ``pair`` agree and fit the state before; a fresh
        claim's fences become the pair's current ones."""
        outcome = claims["redis"].outcome
        event(f"claim: {outcome.value}")
        assert claims["memory"].outcome is outcome, f"claims of {pair!r}: {claims}"
        live, terminal, cancel_requested = before
        if outcome is ClaimOutcome.EXPIRED:
            assert not live, f"claim found {pair!r} expired; the reference had it"
            return
        assert live, f"claim found {pair!r} ({outcome}); the reference had lost it"
        assert terminal == (outcome is ClaimOutcome.TERMINAL), f"claim {outcome} of {pair!r}"
        if outcome is ClaimOutcome.CANCELLED:
            assert cancel_requested, f"claim cancelled {pair!r} without intent"
        if outcome is not ClaimOutcome.RUN:
            return
        assert claims["memory"].attempt == claims["redis"].attempt, f"claims of {pair!r}"
        for claim in claims.values():
            assert claim.origin is not None
            assert claim.origin.to_persisted_string() == ORIGINS[pair.origin].to_persisted_string()
            assert claim.payload == pair.payload
            self.check_trace_context(pair, claim.trace_context)
        fresh = {backend: claim.fence != pair.fence[backend] for backend, claim in claims.items()}
        assert fresh["memory"] == fresh["redis"], f"claims of {pair!r}: {claims} after {pair.fence}"
        if fresh["redis"]:
            # A fresh claim honors cancellation intent instead of running; only the
            # holder's own retry within its lease gets the same fence back.
            assert not cancel_requested, f"claim ran {pair!r} despite cancellation"
            for backend, claim in claims.items():
                assert claim.fence > pair.fence[backend], "a claim must raise the fence"
                pair.supersede(backend, claim.fence)

    @staticmethod
    def check_trace_context(pair: Pair, stored: bytes) -> None:
        """``stored`` is the context of the pair's creating span (or none when unsampled)."""
        spec = TRACE_PARENTS[pair.parent]
        if spec is not None and not spec[0]:
            assert stored == b"", f"{pair!r}: an unsampled create stored {stored!r}"
            return
        context = decode_context(stored)
        assert context is not None, f"{pair!r}: no valid context in {stored!r}"
        trace_id = pair.span_ids[0] if spec is None else CLIENT_TRACE_ID
        assert (context.trace_id, context.span_id) == (trace_id, pair.span_ids[1]), pair
        assert context.trace_state == trace.TraceState([] if spec is None else spec[1]), pair

    lease_ms = st.sampled_from(LEASES_MS)
    consumer = st.sampled_from(CONSUMERS)
    max_attempts = st.sampled_from(MAX_ATTEMPTS)

    @rule(pair=tasks, consumer=consumer, lease_ms=lease_ms, max_attempts=max_attempts)
    def claim_task(self, pair: Pair, consumer: str, lease_ms: int, max_attempts: int) -> None:
        """A worker (re)claims the task's work entry, as after reading or XAUTOCLAIM."""
        self.claim(pair, consumer, lease_ms, max_attempts)

    @rule(which=st.integers(0, 15), consumer=consumer, lease_ms=lease_ms)
    def claim_after_intent(self, which: int, consumer: str, lease_ms: int) -> None:
        """A worker claims a live task whose cancellation was requested (random claims
        rarely meet one): unless a lease is held, the claim must end it cancelled."""

        def intent(pair: Pair, task: Task) -> bool:
            record = self.memory._live(pair.memory_id)  # read-only look at the reference
            cancel_requested = record is not None and record.fields.get("cx") == b"1"
            return cancel_requested and not task.is_terminal

        pair = self.steer(which, intent)
        self.claim(pair, consumer, lease_ms, max(MAX_ATTEMPTS))

    async def entry_of(self, pair: Pair, backend: str) -> WorkEntry:
        """The work entry the task's record names on ``backend`` (``0-2``, which names
        nothing, when it names none: ``0-1`` is a direct claim's, see DIRECT_ENTRY)."""
        task_id = pair.id_on(backend)
        entry: bytes | str | None
        if backend == "memory":
            record = self.memory._live(task_id)  # read-only look at the reference
            entry = None if record is None else record.fields.get("wk")
        else:
            entry = await self.redis.client.hget(self.record_key(pair), "wk")
        partition = parse_task_id(task_id)
        assert partition is not None
        if isinstance(entry, bytes):
            entry = entry.decode()
        return WorkEntry(partition, entry or "0-2", task_id)

    def claim(self, pair: Pair, consumer: str, lease_ms: int, max_attempts: int) -> None:
        """Claim the pair's work entry on both backends and compare."""
        before = self.before_claim(pair)
        claims = {}
        for backend, manager in (("memory", self.memory), ("redis", self.redis)):
            entry = self.run(self.entry_of(pair, backend))
            claims[backend] = self.run(
                self.queue_of(manager).claim(
                    entry,
                    consumer=consumer,
                    lease=timedelta(milliseconds=lease_ms),
                    max_attempts=max_attempts,
                )
            )
        self.check_claims(pair, before, claims)

    @rule(
        partition=st.integers(0, PARTITIONS - 1),
        consumer=consumer,
        count=st.integers(1, 3),
        lease_ms=lease_ms,
        max_attempts=max_attempts,
        first=st.none() | st.integers(0, 15),
    )
    def claim_next(
        self,
        partition: int,
        consumer: str,
        count: int,
        lease_ms: int,
        max_attempts: int,
        first: int | None,
    ) -> None:
        """A worker reads and claims the partition's next new work entries; with
        ``first``, a task of the partition started ahead of the ring's order (a
        newcomer's, as a signal names one: queued or not, the scripts decide)."""
        before = {pair: self.before_claim(pair) for pair in self.pairs}
        mine = [p for p in self.pairs if p.known and parse_task_id(p.redis_id) == partition]
        ahead = mine[first % len(mine)] if first is not None and mine else None
        read: dict[str, list[tuple[Pair, Claim]]] = {}
        for backend, manager in (("memory", self.memory), ("redis", self.redis)):
            claimed = self.run(
                self.queue_of(manager).claim_next(
                    partition,
                    consumer=consumer,
                    count=count,
                    lease=timedelta(milliseconds=lease_ms),
                    max_attempts=max_attempts,
                    first=None if ahead is None else getattr(ahead, f"{backend}_id"),
                )
            )
            read[backend] = []
            for entry, claim in claimed:
                assert entry.task_id is not None  # every entry names a task of this example
                assert parse_task_id(entry.task_id) == partition == entry.partition
                read[backend].append((self.by_id[backend][entry.task_id], claim))
        assert [p for p, _ in read["memory"]] == [p for p, _ in read["redis"]], read
        for (pair, in_memory), (_, in_redis) in zip(read["memory"], read["redis"], strict=True):
            self.check_claims(pair, before[pair], {"memory": in_memory, "redis": in_redis})

    @rule(pair=targets, stale=st.booleans())
    def release(self, pair: Pair, stale: bool) -> None:
        """A worker hands the task back: the fence goes up by one on both."""

        def release(m: TaskManager, task_id: str) -> Awaitable[None]:
            fence = pair.lease_fence(stale, self.backend_of(m))
            return self.queue_of(m).release(task_id, fence=fence)

        if self.both("release", pair, release) == NOTHING:
            for backend in BACKENDS:
                pair.supersede(backend, pair.fence[backend] + 1)

    @rule(pair=targets, stale=st.booleans(), consumer=consumer, lease_ms=lease_ms)
    def renew(self, pair: Pair, stale: bool, consumer: str, lease_ms: int) -> None:
        """A worker renews its lease and learns whether cancellation was requested."""
        lease = timedelta(milliseconds=lease_ms)

        def renew(m: TaskManager, task_id: str) -> Awaitable[bool]:
            fence = pair.lease_fence(stale, self.backend_of(m))
            return self.queue_of(m).renew(task_id, fence=fence, consumer=consumer, lease=lease)

        self.both("renew", pair, renew)

    # -- invariants -------------------------------------------------------------------

    @invariant()
    def every_task_looks_the_same_to_its_owner(self) -> None:
        """Each task's owner sees the same snapshot (or nothing) on both backends, a
        worker the same cancellation flag, and each backend stored the fence the
        pair holds for it."""

        def looks(m: TaskManager, pair: Pair, task_id: str) -> list[Awaitable[Any]]:
            # Both reads change nothing, so checking them after every step is free
            # of side effects (the flag is also readable once the task ended).
            ctx = TaskRequestContext(CONTEXTS[pair.owner], task_id)
            return [m.find_task(ctx), m.is_cancellation_requested(task_id)]

        memory = [
            [
                self.outcome(pair, "memory", call)
                for call in looks(self.memory, pair, pair.memory_id)
            ]
            for pair in self.pairs
        ]
        # Gathered, the Redis reads share one auto-pipelined round trip: this
        # invariant runs after every step, so its cost decides the test's runtime.
        calls = [call for pair in self.pairs for call in looks(self.redis, pair, pair.redis_id)]
        replies = self.run(attempt_all(calls))
        redis = [replies[n : n + 2] for n in range(0, len(replies), 2)]
        stored_fences = self.run(self.stored_fences())
        for pair, in_memory, in_redis, (stored, traced) in zip(
            self.pairs, memory, redis, stored_fences, strict=True
        ):
            in_redis = [self.comparable(pair, "redis", outcome) for outcome in in_redis]
            assert in_memory == in_redis, (
                f"{pair!r} differs:\n memory {in_memory}\n redis  {in_redis}"
            )
            event(f"invariant find: {label(in_memory[0])}")
            record = self.memory._live(pair.memory_id)
            if record is None:
                assert stored is None, f"{pair!r} expired on the reference only"
            else:
                assert record.fields["fn"] == str(pair.fence["memory"]).encode()
                assert stored == str(pair.fence["redis"]).encode()
                # The trace context lives exactly as long as the task does, pieces too.
                spec = TRACE_PARENTS[pair.parent]
                unsampled = spec is not None and not spec[0]
                keeps = not unsampled and record.fields["st"] not in _TERMINAL
                assert ("tp" in record.fields) == keeps, f"{pair!r} in memory"
                # Past 64 bytes a value is kept in pieces: any tracestate here is.
                pieced = keeps and spec is not None and bool(spec[1])
                assert traced == (keeps, pieced), f"{pair!r} in Redis: {traced}"

    async def stored_fences(self) -> list[tuple[bytes | None, tuple[bool, bool]]]:
        """The fence of every task record in Redis (``None``: no record), and whether it
        holds a trace context and a second piece of one, in one round trip. A record
        never claimed has no ``fn`` field, which reads as 0."""
        async with self.redis.client.pipeline(transaction=False) as pipe:
            for pair in self.pairs:
                pipe.hmget(self.record_key(pair), ["st", "fn", "tp", "tp+1"])
            rows: list[list[bytes | None]] = await pipe.execute()
        return [
            (None if status is None else fence or b"0", (tp is not None, piece is not None))
            for status, fence, tp, piece in rows
        ]

    @invariant()
    def no_key_outlives_its_task(self) -> None:
        """Every key under the prefix expires, except the per-partition streams and
        stats (the rule of ``Backend.immortal_keys``, in one round trip after the SCAN)."""
        keys = [
            key
            for key in self.run(self.store.all_keys())
            if not self.store.keys.is_partition_key(key)
        ]
        ttls = self.run(self.pttls(keys))
        # -2 is a key that expired after the SCAN: only -1 is a key without expiry.
        assert [key for key, ttl in zip(keys, ttls, strict=True) if ttl == -1] == []

    async def pttls(self, keys: list[str]) -> list[int]:
        """``PTTL`` of each of ``keys``."""
        async with self.redis.client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.pttl(key)
            ttls: list[int] = await pipe.execute()
        return ttls


# Generation takes well under a minute; shrinking a failure to its minimal sequence
# replays many examples (hypothesis gives up after five minutes): let it finish.
@pytest.mark.timeout(600)
def test_memory_and_redis_agree(redis_server: RedisServer) -> None:
    """Random operation sequences give the same results on both backends."""

    class OnTheSessionServer(MemoryVersusRedis):
        """The machine, bound to the session's redis-server."""

        def __init__(self) -> None:
            super().__init__(redis_server.url)

    run_state_machine_as_test(
        OnTheSessionServer,
        settings=settings(
            max_examples=MAX_EXAMPLES,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
