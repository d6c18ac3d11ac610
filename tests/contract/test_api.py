"""The public API: what ``redis_tasks`` exports, and that every public name is documented."""

from __future__ import annotations

import inspect

import redis_tasks
from redis_tasks import _errors

EXPORTED = [
    "TERMINAL_STATUSES",
    "BackendError",
    "CapacityError",
    "Claim",
    "ClaimOutcome",
    "ConsumerView",
    "Handler",
    "InMemoryTaskManager",
    "InputKeyReusedError",
    "InputRequest",
    "Inspection",
    "InternalError",
    "InvalidTransitionError",
    "JsonRpcError",
    "LeaseLostError",
    "LeaseView",
    "LimitExceededError",
    "Limits",
    "PartitionView",
    "PickupHistogram",
    "PlanPolicy",
    "QuotaExceededError",
    "RedisTaskManager",
    "RedisTasksError",
    "ReplicationError",
    "RequestContext",
    "Task",
    "TaskEventPublisher",
    "TaskEventRegistration",
    "TaskExecution",
    "TaskFailed",
    "TaskInspection",
    "TaskManager",
    "TaskMatches",
    "TaskNotFoundError",
    "TaskOrigin",
    "TaskParked",
    "TaskRequestContext",
    "TaskStatus",
    "TaskTerminalError",
    "TaskUpdateContext",
    "TenantPlan",
    "ValidationError",
    "Worker",
    "task_ref",
]


def test_all_is_pinned_and_sorted() -> None:
    assert redis_tasks.__all__ == EXPORTED
    assert sorted(EXPORTED, key=lambda n: (not n.isupper(), n)) == EXPORTED
    # Exactly the exported names are bound publicly (submodules aside): a name in
    # __all__ that the package never binds fails here, and so does one imported
    # into the package but left out of __all__.
    bound = {
        name
        for name, value in vars(redis_tasks).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert bound == set(EXPORTED)
    # Each exported class is bound under its own name, not as an alias of another.
    for name in EXPORTED:
        obj = getattr(redis_tasks, name)
        if inspect.isclass(obj):
            assert obj.__name__ == name, f"redis_tasks.{name} is {obj.__qualname__}"


def test_every_public_name_and_method_has_a_docstring() -> None:
    missing = []
    for name in EXPORTED:
        obj = getattr(redis_tasks, name)
        if not inspect.isclass(obj):
            continue
        if not (obj.__doc__ or "").strip():
            missing.append(name)
        for attr, member in vars(obj).items():
            if attr.startswith("_") or not (
                inspect.isfunction(member)
                or isinstance(member, property | classmethod | staticmethod)
            ):
                continue
            target = member.fget if isinstance(member, property) else member
            if not (getattr(target, "__doc__", None) or "").strip():
                missing.append(f"{name}.{attr}")
    assert missing == []


def test_every_error_derives_from_the_root_and_the_tree_is_documented() -> None:
    doc = _errors.__doc__ or ""
    for name in _errors.__all__:
        error = getattr(_errors, name)
        assert issubclass(error, redis_tasks.RedisTasksError)
        assert name in doc
    assert issubclass(redis_tasks.TaskTerminalError, redis_tasks.InvalidTransitionError)
    assert issubclass(redis_tasks.LimitExceededError, redis_tasks.ValidationError)
    # Redis down is an outage, not a bug: catching InternalError does not catch it.
    assert not issubclass(redis_tasks.BackendError, redis_tasks.InternalError)
    assert issubclass(redis_tasks.ReplicationError, redis_tasks.BackendError)
    assert issubclass(redis_tasks.QuotaExceededError, redis_tasks.CapacityError)
