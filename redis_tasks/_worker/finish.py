"""Writing a run's outcome: the one terminal transition, retried within the lease;
or handing its task back (:func:`hand_back`), when the worker stopped it.

A handler's outcome is worth a retry while the lease lasts: after that another
worker may be running the task, and the fence refuses this write anyway. What
cannot be stored (a result that is not JSON, or too big) fails the task with a
generic error instead, so the client still learns the task ended. Only Redis
failing (:class:`BackendError`) is retried: anything unexpected, a bug above all,
is logged once with where it was raised, and the task is left to its lease.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Final

from redis_tasks._errors import (
    BackendError,
    LeaseLostError,
    RedisTasksError,
    ReplicationError,
    TaskNotFoundError,
    TaskTerminalError,
    ValidationError,
)
from redis_tasks._lease import INTERNAL_ERROR
from redis_tasks._manager import TaskManager
from redis_tasks._models import JsonRpcError
from redis_tasks._telemetry.metrics import METRICS
from redis_tasks._work_queue import WorkQueue

from .log import frames, log
from .run_state import Run, RunOutcome, Settings

__all__ = ["hand_back", "record_outcome"]

_DONE: Final = {
    RunOutcome.COMPLETED: "task completed",
    RunOutcome.FAILED: "task failed",
    RunOutcome.CANCELLED: "task cancelled",
}


async def _write(manager: TaskManager, run: Run, outcome: RunOutcome, value: Any) -> None:
    execution = run.execution
    if outcome is RunOutcome.COMPLETED:
        await manager.complete_task(execution.task_id, value, fence=execution.fence)
    elif outcome is RunOutcome.FAILED:
        assert isinstance(value, JsonRpcError)
        await manager.fail_task(execution.task_id, value, fence=execution.fence)
    else:
        await manager.cancel_task(execution.task_id, fence=execution.fence)


async def record_outcome(
    manager: TaskManager, run: Run, outcome: RunOutcome, value: Any
) -> tuple[RunOutcome, str | None]:
    """Write ``outcome`` (with ``value``: a result or a :class:`JsonRpcError`) for ``run``.

    Returns the outcome it wrote (``FAILED`` in place of a result that cannot be
    stored) and ``None``, or the log event that says why the write was not
    recorded (``lease_lost``, ``already_terminal``, ``task_expired``,
    ``outcome_unconfirmed``, ``finish_abandoned``, ``finish_failed``).
    """
    execution = run.execution
    fields = {"task": run.task, "fence": execution.fence, "attempt": execution.attempt}
    delay = 0.05
    while True:
        try:
            await _write(manager, run, outcome, value)
        except ValidationError as exc:
            # The handler returned something we cannot store (not JSON, too big).
            log(
                logging.ERROR,
                "handler result refused",
                "result_invalid",
                error=type(exc).__name__,
                **fields,
            )
            outcome, value = RunOutcome.FAILED, INTERNAL_ERROR
            continue
        except LeaseLostError:
            METRICS.lease_lost()
            event = "lease_lost"
            log(
                logging.WARNING,
                "lease lost: another worker owns the task; outcome dropped",
                event,
                **fields,
            )
        except TaskTerminalError:
            event = "already_terminal"
            log(logging.INFO, "task already terminal; outcome dropped", event, **fields)
        except TaskNotFoundError:
            event = "task_expired"
            log(logging.INFO, "task expired before it finished", event, **fields)
        except ReplicationError:
            # Recorded on the primary; its replicas did not confirm in time. Not
            # retried: a shard may stay short of replicas for a while.
            event = "outcome_unconfirmed"
            log(logging.WARNING, "outcome recorded but not confirmed by replicas", event, **fields)
        except BackendError as exc:
            if time.monotonic() > run.lease_until:
                METRICS.lease_lost()
                event = "finish_abandoned"
                log(
                    logging.WARNING,
                    "could not record the outcome within the lease; "
                    "another worker will run the task again",
                    event,
                    error=type(exc).__name__,
                    **fields,
                )
                return outcome, event
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
            continue
        except Exception as exc:
            # Unexpected: an InternalError, a full Redis, or a bug (a TypeError, say),
            # which a retry would only repeat until the lease ran out. The task is
            # left to its lease: unless the outcome was written after all (then it
            # is terminal), the lease runs out and another worker runs it again.
            event = "finish_failed"
            log(
                logging.ERROR,
                "could not record the outcome",
                event,
                error=type(exc).__name__,
                where=frames(exc),
                **fields,
            )
        else:
            # Enqueue, not creation: the same for a task that was never handed back
            # (a hand-back enqueues it anew), with the same clock-skew caveat.
            if METRICS.enabled:
                METRICS.create_to_terminal(run.enqueued_ago())
            if outcome is RunOutcome.FAILED and isinstance(value, JsonRpcError):
                # Why it failed, without what it said: the code, never the message,
                # which may carry what the handler saw.
                fields["code"] = value.code
            log(logging.INFO, _DONE[outcome], f"task_{outcome.value}", **fields)
            return outcome, None
        return outcome, event


async def hand_back(queue: WorkQueue, settings: Settings, task_id: str, fence: int) -> None:
    """Hand ``task_id`` back for any worker to run at once, within a call's deadline;
    a failure leaves it to its lease."""
    task = settings.ref(task_id)
    try:
        async with asyncio.timeout(settings.timeout):
            await queue.release(task_id, fence=fence)
        log(logging.INFO, "task handed back", "task_released", task=task, fence=fence)
    except (RedisTasksError, TimeoutError) as exc:
        # Not handed back: the lease runs out and another worker reclaims it.
        log(
            logging.WARNING,
            "hand back failed",
            "release_failed",
            task=task,
            error=type(exc).__name__,
        )
