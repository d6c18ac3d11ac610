"""Task snapshots, input requests, JSON-RPC errors and the request contexts."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ._errors import ValidationError
from ._ids import task_ref
from ._origin import TaskOrigin
from ._status import TaskStatus

__all__ = [
    "INPUT_METHODS",
    "InputMethod",
    "InputRequest",
    "JsonRpcError",
    "RequestContext",
    "Task",
    "TaskRequestContext",
    "TaskUpdateContext",
    "response_kinds",
]

InputMethod = Literal["elicitation/create", "sampling/createMessage", "roots/list"]

#: Each input method and the one-letter kind the Lua scripts compare answers by.
INPUT_METHODS: Final[dict[InputMethod, str]] = {
    "elicitation/create": "e",
    "sampling/createMessage": "s",
    "roots/list": "r",
}

_ELICIT_ACTIONS: Final = frozenset({"accept", "decline", "cancel"})
_ROLES: Final = frozenset({"user", "assistant"})
_TASK_ID_FORBIDDEN = re.compile(r"[\r\n]")


def _is_elicit_result(response: Mapping[str, Any]) -> bool:
    content = response.get("content")
    return response.get("action") in _ELICIT_ACTIONS and (
        content is None or isinstance(content, dict)
    )


def _is_content_block(block: object) -> bool:
    return isinstance(block, dict) and isinstance(block.get("type"), str)


def _is_create_message_result(response: Mapping[str, Any]) -> bool:
    content = response.get("content")
    blocks_ok = _is_content_block(content) or (
        isinstance(content, list) and bool(content) and all(map(_is_content_block, content))
    )
    stop = response.get("stopReason")
    return (
        response.get("role") in _ROLES
        and blocks_ok
        and isinstance(response.get("model"), str)
        and (stop is None or isinstance(stop, str))
    )


def _is_list_roots_result(response: Mapping[str, Any]) -> bool:
    roots = response.get("roots")
    return isinstance(roots, list) and all(
        isinstance(root, dict) and isinstance(root.get("uri"), str) for root in roots
    )


def response_kinds(response: object) -> str:
    """Return the kind letters of every request variant ``response`` can answer.

    An empty string means the response answers no variant and is ignored.
    """
    if not isinstance(response, dict):
        return ""
    kinds = ""
    if _is_elicit_result(response):
        kinds += INPUT_METHODS["elicitation/create"]
    if _is_create_message_result(response):
        kinds += INPUT_METHODS["sampling/createMessage"]
    if _is_list_roots_result(response):
        kinds += INPUT_METHODS["roots/list"]
    return kinds


class InputRequest(BaseModel):
    """A server-to-client request a task needs answered (SEP-2663 ``inputRequests``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: InputMethod
    params: dict[str, Any] = Field(default_factory=dict, repr=False)

    @property
    def kind(self) -> str:
        """The one-letter kind the scripts match answers against."""
        return INPUT_METHODS[self.method]

    def matches(self, response: object) -> bool:
        """Whether ``response`` is the result variant that answers this request.

        ``elicitation/create`` takes an elicit result (``action`` of accept,
        decline or cancel, optional ``content`` object); ``sampling/createMessage``
        a create-message result (``role``, ``content``, ``model``, optional
        ``stopReason``); ``roots/list`` a list-roots result (``roots``).
        """
        return self.kind in response_kinds(response)

    def to_wire(self) -> dict[str, Any]:
        """The request as it appears in a task's ``inputRequests``."""
        return {"method": self.method, "params": self.params}


class JsonRpcError(BaseModel):
    """A JSON-RPC error object: the outcome of a ``failed`` task."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    code: int
    message: str
    data: Any = Field(default=None, repr=False)

    def to_wire(self) -> dict[str, Any]:
        """The error as JSON-RPC renders it (``data`` only when present)."""
        wire: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            wire["data"] = self.data
        return wire


def _whole_positive_ms(value: timedelta | None, name: str) -> timedelta | None:
    if value is None:
        return None
    if value <= timedelta(0) or value % timedelta(milliseconds=1):
        raise ValueError(f"{name} must be a positive whole number of milliseconds")
    return value


def _utc(value: datetime, name: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware")
    return value.astimezone(UTC)


def _iso(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


class Task(BaseModel):
    """An authoritative snapshot of one task.

    Invariants (checked on every construction, so a stored task that breaks
    them is never handed out as valid): input requests exist exactly when the
    status is ``input_required``, a result exactly when ``completed``, an error
    exactly when ``failed``; ``last_updated_at >= created_at``; TTL and poll
    interval are positive whole milliseconds; the ID has no CR or LF.
    Origin, input requests, result, error and metadata never appear in ``repr``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    # In repr as its reference only (see __repr_args__): the ID is a capability.
    task_id: str = Field(min_length=1, repr=False)
    status: TaskStatus
    status_message: str | None = None
    created_at: datetime
    last_updated_at: datetime
    ttl: timedelta | None
    poll_interval: timedelta | None = None
    origin: TaskOrigin = Field(repr=False)
    input_requests: dict[str, InputRequest] = Field(default_factory=dict, repr=False)
    result: dict[str, Any] | None = Field(default=None, repr=False)
    error: JsonRpcError | None = Field(default=None, repr=False)
    metadata: dict[str, Any] = Field(default_factory=dict, repr=False)

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        yield "task", task_ref(self.task_id)
        yield from super().__repr_args__()

    @field_validator("created_at", "last_updated_at")
    @classmethod
    def _aware_utc(cls, value: datetime, info: Any) -> datetime:
        return _utc(value, info.field_name)

    @field_validator("ttl", "poll_interval")
    @classmethod
    def _whole_ms(cls, value: timedelta | None, info: Any) -> timedelta | None:
        return _whole_positive_ms(value, info.field_name)

    @model_validator(mode="after")
    def _status_fits_payload(self) -> Task:
        return self.check_invariants()

    def check_invariants(self) -> Task:
        """Raise ``ValueError`` unless the snapshot keeps the class invariants; ``self``.

        Construction runs this; code that builds a task with ``model_construct``
        from values already in form must call it itself.
        """
        if _TASK_ID_FORBIDDEN.search(self.task_id):
            raise ValueError("task_id must not contain CR or LF")
        if self.last_updated_at < self.created_at:
            raise ValueError("last_updated_at must not precede created_at")
        status = self.status
        if bool(self.input_requests) != (status is TaskStatus.INPUT_REQUIRED):
            raise ValueError("input requests exist exactly when the status is input_required")
        if (self.result is not None) != (status is TaskStatus.COMPLETED):
            raise ValueError("a result exists exactly when the status is completed")
        if (self.error is not None) != (status is TaskStatus.FAILED):
            raise ValueError("an error exists exactly when the status is failed")
        return self

    @property
    def is_terminal(self) -> bool:
        """Whether the task reached ``completed``, ``failed`` or ``cancelled``."""
        return self.status.is_terminal

    def to_wire(self) -> dict[str, Any]:
        """Render the SEP-2663 ``DetailedTask`` JSON object for this snapshot."""
        wire: dict[str, Any] = {"taskId": self.task_id, "status": self.status.value}
        if self.status_message is not None:
            wire["statusMessage"] = self.status_message
        wire["createdAt"] = _iso(self.created_at)
        wire["lastUpdatedAt"] = _iso(self.last_updated_at)
        wire["ttlMs"] = None if self.ttl is None else self.ttl // timedelta(milliseconds=1)
        if self.poll_interval is not None:
            wire["pollIntervalMs"] = self.poll_interval // timedelta(milliseconds=1)
        if self.status is TaskStatus.INPUT_REQUIRED:
            wire["inputRequests"] = {k: r.to_wire() for k, r in self.input_requests.items()}
        elif self.status is TaskStatus.COMPLETED:
            wire["result"] = self.result
        elif self.status is TaskStatus.FAILED:
            assert self.error is not None  # guaranteed by the model validator
            wire["error"] = self.error.to_wire()
        return wire


def _require_text(value: object, what: str, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{what} must be a non-empty str")


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who asks: the endpoint path and the authorization partition key.

    A task is bound to the context it was created with; later requests see it
    only with an equal endpoint and an equal partition key (``None`` is the
    anonymous partition and matches only ``None``). Size bounds are checked by
    the manager, whose :class:`Limits` are configurable.
    """

    endpoint: str
    partition_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        _require_text(self.endpoint, "endpoint")
        _require_text(self.partition_key, "partition_key", allow_none=True)


@dataclass(frozen=True, slots=True)
class TaskRequestContext:
    """A client request about one task (``tasks/get``, ``tasks/cancel``)."""

    request: RequestContext
    task_id: str

    def __post_init__(self) -> None:
        if not isinstance(self.request, RequestContext):
            raise ValidationError("request must be a RequestContext")
        if not isinstance(self.task_id, str):
            raise ValidationError("task_id must be a str")

    def __repr__(self) -> str:
        # The task by its reference: the ID is a capability.
        return f"TaskRequestContext(request={self.request!r}, task={task_ref(self.task_id)!r})"


@dataclass(frozen=True, slots=True)
class TaskUpdateContext:
    """A client's answers to a task's outstanding input requests (``tasks/update``)."""

    request: RequestContext
    task_id: str
    input_responses: Mapping[str, Any] = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.request, RequestContext):
            raise ValidationError("request must be a RequestContext")
        if not isinstance(self.task_id, str):
            raise ValidationError("task_id must be a str")
        if not isinstance(self.input_responses, Mapping):
            raise ValidationError("input_responses must be a mapping")

    def __repr__(self) -> str:
        # The task by its reference (the ID is a capability), and never the answers.
        return f"TaskUpdateContext(request={self.request!r}, task={task_ref(self.task_id)!r})"
