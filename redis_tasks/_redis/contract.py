"""``RedisContract``: the task manager's contract as script calls.

Each hook of :class:`~redis_tasks._base.TaskManagerBase` (input already valid and
encoded) is one script call that authorizes, reads or transitions, and emits the
event, atomically; arguments are bound by name (:mod:`.scripts`). The contract is
given the key space and the :class:`~.link.Link` its calls go through; construction,
connections and start-up are :class:`~.manager.RedisTaskManager`'s.
"""

from __future__ import annotations

from typing import Any, Final

from redis_tasks._base import NewTask, Outcome, TaskManagerBase
from redis_tasks._codes import ReturnCode, error_for
from redis_tasks._errors import InternalError, TaskNotFoundError
from redis_tasks._ids import parse_task_id
from redis_tasks._limits import Limits
from redis_tasks._models import Task
from redis_tasks._plans import PlanPolicy
from redis_tasks._record import EncodedAnswer, EncodedRequest, decode_answers, decode_task
from redis_tasks._status import TaskStatus

from . import replies
from . import scripts as lua
from .keys import KeySpace, TaskKeys
from .link import Link
from .scripts import Arg
from .turn_batches import TurnBatches

__all__ = ["RedisContract"]

#: The most fenced finishes one ``finish_batch`` call carries: a script runs alone on
#: its server, so a bigger batch would hold every other client up for longer.
FINISH_BATCH: Final = 64
#: The most creates one ``create`` call carries (for the same reason; a create
#: carries its origin and payload, and does more than a finish).
CREATE_BATCH: Final = 32


def _message_args(message: bytes | None) -> tuple[bytes, bytes]:
    """A status message as the scripts' ``has_message``, ``message`` pair."""
    return (b"0", b"") if message is None else (b"1", message)


def _partition_of(new: NewTask) -> int:
    """The partition of a task to create (its ID, which the manager made, names it)."""
    partition = parse_task_id(new.task_id)
    if partition is None:  # the manager made the ID: a bug
        raise InternalError("a new task's ID names no partition")
    return partition


class RedisContract(TaskManagerBase):
    """The contract's hooks on Redis: one script call each, through ``link``'s runner,
    with ``keys``' layout and ``link``'s ``events`` argument."""

    def __init__(
        self,
        keys: KeySpace,
        link: Link,
        limits: Limits | None,
        partitions: int,
        *,
        fair_dispatch: bool = True,
        whole_task_ids: bool = False,
        plans: PlanPolicy | None = None,
    ) -> None:
        super().__init__(
            limits,
            partitions,
            fair_dispatch=fair_dispatch,
            whole_task_ids=whole_task_ids,
            plans=plans,
        )
        self._keys = keys
        # Read once per call, so a call's runner and events argument belong together.
        self._link = link
        #: A worker's fenced finishes of one turn, one script call per partition.
        self._finishes: TurnBatches[tuple[str, Outcome], None] = TurnBatches(
            self._finish_one, self._finish_many, FINISH_BATCH
        )
        #: The creates of one turn, one script call per partition.
        self._creates: TurnBatches[NewTask, int] = TurnBatches(
            self._create_one, self._create_many, CREATE_BATCH
        )

    # -- helpers -------------------------------------------------------------------

    def _task_keys(self, task_id: str) -> TaskKeys | None:
        return self._keys.of_task(task_id)

    def _worker_keys(self, task_id: str) -> TaskKeys:
        keys = self._keys.of_task(task_id)
        if keys is None:
            raise TaskNotFoundError()
        return keys

    # -- the contract's hooks (input valid and encoded: see redis_tasks._base) ---------

    async def _find(self, task_id: str, endpoint: bytes, binding: bytes) -> Task | None:
        """One ``find`` script call; ``None`` when unknown, expired or unauthorized."""
        keys = self._task_keys(task_id)
        if keys is None:
            return None
        digest = keys.binding_digest(endpoint, binding)
        runner = self._link.runner
        grant = keys.grant(endpoint, binding)

        def find(confirm: int) -> lua.Call:
            return lua.find(
                task=keys.task, requests=keys.requests, grant=grant, binding=digest, confirm=confirm
            )

        try:
            reply = await runner.run(find(0))
            task = decode_task(task_id, *replies.snapshot(reply))
            if (task.status.is_terminal or task.status is TaskStatus.INPUT_REQUIRED) and (
                await runner.confirms(keys.task)
            ):
                # What a client acts on (an outcome, an input request) is answered
                # only once a replica holds it: read on the primary, it may be a write
                # whose caller heard nothing yet and that a failover takes back (the
                # history checker saw a client read an outcome, then the task run
                # again). Read again with a write after it, and WAIT for that.
                reply = await runner.run(find(1), durable=True)
                task = decode_task(task_id, *replies.snapshot(reply))
        except TaskNotFoundError:
            return None
        return task

    async def _update(
        self, task_id: str, endpoint: bytes, binding: bytes, answers: list[EncodedAnswer]
    ) -> None:
        """One ``update`` script call with the answers that match some request variant."""
        link = self._link
        keys = self._task_keys(task_id)
        if keys is None:
            raise TaskNotFoundError()
        digest = keys.binding_digest(endpoint, binding)
        responses: list[Arg] = []
        for answer in answers:
            responses += (answer.key, answer.kinds, answer.body)
        await link.runner.run(
            lua.update(
                task=keys.task,
                requests=keys.requests,
                answers=keys.answers,
                journal=keys.journal,
                events=keys.events,
                signals=keys.signals,
                grant=keys.grant(endpoint, binding),
                work=keys.work,
                stats=keys.stats,
                task_id=task_id,
                binding=digest,
                event_opts=link.events,
                fair=int(self._fair),
                responses=responses,
            ),
            durable=True,
        )

    async def _request_cancel(self, task_id: str, endpoint: bytes, binding: bytes) -> bool:
        """One ``request_cancel`` script call; whether it ended the task."""
        link = self._link
        keys = self._task_keys(task_id)
        if keys is None:
            raise TaskNotFoundError()
        digest = keys.binding_digest(endpoint, binding)
        reply = await link.runner.run(
            lua.request_cancel(
                task=keys.task,
                requests=keys.requests,
                issued=keys.issued,
                answers=keys.answers,
                journal=keys.journal,
                work=keys.work,
                events=keys.events,
                stats=keys.stats,
                signals=keys.signals,
                grant=keys.grant(endpoint, binding),
                task_id=task_id,
                binding=digest,
                event_opts=link.events,
            ),
            durable=True,
        )
        return replies.cancel_ended(reply)

    async def _create(self, new: NewTask) -> int:
        """A create joins the turn's others of its partition (:mod:`.turn_batches`):
        each stored, enqueued and announced atomically, as one ``create`` would."""
        return await self._creates.submit(_partition_of(new), new)

    async def _create_many(self, partition: int, news: list[NewTask]) -> list[int | BaseException]:
        """One ``create`` call for ``news`` of ``partition``: each one's creation time,
        or its error."""
        link = self._link
        creates: list[lua.CreateArgs] = []
        for new in news:
            task_keys = self._worker_keys(new.task_id)
            admitted = new.admission
            # Positional, as _finish_many's: the loader holds CreateArgs to the header.
            creates.append(
                lua.CreateArgs(
                    new.task_id,
                    task_keys.grant_digest(new.endpoint, new.binding),
                    task_keys.binding_digest(new.endpoint, new.binding),
                    new.origin,
                    new.payload,
                    new.ttl_ms,
                    new.poll_ms,
                    new.metadata,
                    new.trace_context,
                    admitted.tenant,
                    lua.limits_arg(
                        admitted.settings,
                        admitted.cap,
                        admitted.max_open,
                        admitted.rate_us,
                        admitted.burst_us,
                        admitted.plan,
                    ),
                )
            )
        keys = self._keys
        # The partition's tenant keys (ring, tenants, seen), which name no tenant; each
        # tenant's own keys the script makes from the tag.
        tenant = keys.tenant(partition, "")
        reply, unconfirmed = await link.runner.run_confirmed(
            lua.create(
                work=keys.work(partition),
                events=keys.events(partition),
                stats=keys.stats(partition),
                ring=tenant.ring,
                tenants=tenant.tenants,
                signals=keys.signals(partition),
                seen=tenant.seen,
                tag=keys.tag(partition),
                event_opts=link.events,
                fair=int(self._fair),
                creates=creates,
            )
        )
        return replies.created(reply, len(news), unconfirmed)

    async def _create_one(self, new: NewTask) -> int:
        """A lone create: a ``create`` call of one."""
        (result,) = await self._create_many(_partition_of(new), [new])
        if isinstance(result, BaseException):
            raise result
        return result

    async def _set_working(self, task_id: str, fence: bytes, message: bytes | None) -> None:
        """One ``set_status`` script call."""
        link = self._link
        has_message, message_arg = _message_args(message)
        keys = self._worker_keys(task_id)
        await link.runner.run(
            lua.set_status(
                task=keys.task,
                requests=keys.requests,
                events=keys.events,
                task_id=task_id,
                fence=fence,
                has_message=has_message,
                message=message_arg,
                event_opts=link.events,
            )
        )

    async def _request_input(
        self, task_id: str, fence: bytes, message: bytes | None, requests: list[EncodedRequest]
    ) -> dict[str, Any]:
        """One ``request_input`` script call; returns answers recorded before."""
        link = self._link
        has_message, message_arg = _message_args(message)
        keys = self._worker_keys(task_id)
        this_round: list[Arg] = []
        for request in requests:
            this_round += (request.key, request.fingerprint, request.body)
        reply = await link.runner.run(
            lua.request_input(
                task=keys.task,
                requests=keys.requests,
                issued=keys.issued,
                answers=keys.answers,
                journal=keys.journal,
                events=keys.events,
                task_id=task_id,
                fence=fence,
                has_message=has_message,
                message=message_arg,
                event_opts=link.events,
                round=this_round,
            )
        )
        return decode_answers(replies.answers(reply, "request_input"))

    async def _take_answers(self, task_id: str, fence: bytes) -> dict[str, Any]:
        """One ``take_answers`` script call."""
        keys = self._worker_keys(task_id)
        reply = await self._link.runner.run(
            lua.take_answers(task=keys.task, answers=keys.answers, fence=fence)
        )
        return decode_answers(replies.answers(reply, "take_answers"))

    async def _finish(self, task_id: str, outcome: Outcome) -> None:
        """A fenced finish joins the turn's others of its partition (:mod:`.turn_batches`);
        an unfenced one (an operation ID, a signal to the worker) is one ``finish`` call."""
        partition = parse_task_id(task_id)
        if partition is None:
            raise TaskNotFoundError()
        if outcome.operation:
            await self._finish_one((task_id, outcome))
        else:
            # Only the ID and its partition: the batch names each task's keys itself.
            await self._finishes.submit(partition, (task_id, outcome))

    async def _finish_many(
        self, partition: int, finishes: list[tuple[str, Outcome]]
    ) -> list[BaseException | None]:
        """One ``finish_batch`` call for fenced ``finishes`` of ``partition``: each one's
        error, or ``None``."""
        link = self._link
        outcomes: list[lua.FinishArgs] = []
        for task_id, outcome in finishes:
            has_message, message = _message_args(outcome.message)
            # Positional (keywords cost 0.2 us a task more): the loader holds FinishArgs'
            # fields to the header's group, and mypy these arguments to its fields.
            outcomes.append(
                lua.FinishArgs(
                    task_id,
                    outcome.fence,
                    outcome.status.value,
                    has_message,
                    message,
                    outcome.result_field,
                    outcome.value,
                )
            )
        keys = self._keys
        reply, unconfirmed = await link.runner.run_confirmed(
            lua.finish_batch(
                work=keys.work(partition),
                events=keys.events(partition),
                stats=keys.stats(partition),
                tag=keys.tag(partition),
                event_opts=link.events,
                outcomes=outcomes,
            )
        )
        codes = reply[1:]
        if len(codes) != len(finishes) or not all(isinstance(code, int) for code in codes):
            raise InternalError("unexpected script reply")
        return [unconfirmed if code == ReturnCode.OK else error_for(code, None) for code in codes]

    async def _finish_one(self, finish: tuple[str, Outcome]) -> None:
        """One ``finish`` script call."""
        task_id, outcome = finish
        keys = self._worker_keys(task_id)
        link = self._link
        has_message, message = _message_args(outcome.message)
        await link.runner.run(
            lua.finish(
                task=keys.task,
                requests=keys.requests,
                issued=keys.issued,
                answers=keys.answers,
                journal=keys.journal,
                work=keys.work,
                events=keys.events,
                stats=keys.stats,
                signals=keys.signals,
                task_id=keys.task_id,
                fence=outcome.fence,
                status=outcome.status.value,
                has_message=has_message,
                message=message,
                outcome_field=outcome.result_field,
                outcome=outcome.value,
                operation=outcome.operation,
                event_opts=link.events,
            ),
            durable=True,
        )

    async def _cancel_requested(self, task_id: str, fence: bytes) -> bool:
        """One ``cancel_requested`` script call."""
        keys = self._worker_keys(task_id)
        reply = await self._link.runner.run(lua.cancel_requested(task=keys.task, fence=fence))
        return replies.flag(reply, "cancel_requested")
