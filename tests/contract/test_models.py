"""Task invariants and the SEP-2663 wire rendering."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pydantic
import pytest

from redis_tasks import (
    TERMINAL_STATUSES,
    InputRequest,
    JsonRpcError,
    Task,
    TaskOrigin,
    TaskStatus,
)
from tests.support.helpers import ELICIT, ELICIT_ANSWER, ROOTS, ROOTS_ANSWER, SAMPLE, SAMPLE_ANSWER

ORIGIN = TaskOrigin.from_persisted_string('{"tool":"get_weather","arguments":{"city":"NY"}}')
T0 = datetime(2025, 11, 25, 10, 30, tzinfo=UTC)
T1 = datetime(2025, 11, 25, 10, 50, tzinfo=UTC)

# The DetailedTask examples of SEP-2663 ("Example Message Flow" and "Error Handling"),
# without the envelope's resultType, which belongs to the response, not the task.
SEP_WORKING: dict[str, Any] = {
    "taskId": "786512e2-9e0d-44bd-8f29-789f320fe840",
    "status": "working",
    "createdAt": "2025-11-25T10:30:00Z",
    "lastUpdatedAt": "2025-11-25T10:50:00Z",
    "ttlMs": 3600000,
    "pollIntervalMs": 5000,
}
SEP_INPUT_REQUIRED: dict[str, Any] = {
    **SEP_WORKING,
    "status": "input_required",
    "inputRequests": {
        "name": {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": "Please enter your name.",
                "requestedSchema": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "required": ["name"],
                },
            },
        }
    },
}
SEP_COMPLETED: dict[str, Any] = {
    **SEP_WORKING,
    "status": "completed",
    "result": {"content": [{"type": "text", "text": "Hello, Luca!"}], "isError": False},
}
SEP_FAILED: dict[str, Any] = {
    "taskId": "786512e2-9e0d-44bd-8f29-789f820fe840",
    "status": "failed",
    "createdAt": "2025-11-25T10:30:00Z",
    "lastUpdatedAt": "2025-11-25T10:40:00Z",
    "ttlMs": 3600000,
    "statusMessage": "Tool execution failed: API rate limit exceeded",
    "error": {"code": -32603, "message": "API rate limit exceeded"},
}
ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z")


def task(**changes: Any) -> Task:
    fields: dict[str, Any] = {
        "task_id": "786512e2-9e0d-44bd-8f29-789f320fe840",
        "status": TaskStatus.WORKING,
        "created_at": T0,
        "last_updated_at": T1,
        "ttl": timedelta(hours=1),
        "poll_interval": timedelta(seconds=5),
        "origin": ORIGIN,
    }
    fields.update(changes)
    return Task(**fields)


def _same_shape(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert ours.keys() == theirs.keys()
    for key, value in theirs.items():
        if key in ("createdAt", "lastUpdatedAt"):
            assert ISO_UTC.fullmatch(ours[key])
            parsed = datetime.fromisoformat(ours[key].replace("Z", "+00:00"))
            assert parsed == datetime.fromisoformat(value.replace("Z", "+00:00"))
        else:
            assert ours[key] == value, key


def test_working_task_renders_like_the_sep_example() -> None:
    _same_shape(task().to_wire(), SEP_WORKING)


def test_input_required_task_renders_like_the_sep_example() -> None:
    request = InputRequest.model_validate(SEP_INPUT_REQUIRED["inputRequests"]["name"])
    wire = task(status=TaskStatus.INPUT_REQUIRED, input_requests={"name": request}).to_wire()
    _same_shape(wire, SEP_INPUT_REQUIRED)


def test_completed_task_renders_like_the_sep_example() -> None:
    wire = task(status=TaskStatus.COMPLETED, result=SEP_COMPLETED["result"]).to_wire()
    _same_shape(wire, SEP_COMPLETED)


def test_failed_task_renders_like_the_sep_example() -> None:
    failed = task(
        task_id="786512e2-9e0d-44bd-8f29-789f820fe840",
        status=TaskStatus.FAILED,
        last_updated_at=datetime(2025, 11, 25, 10, 40, tzinfo=UTC),
        poll_interval=None,
        status_message="Tool execution failed: API rate limit exceeded",
        error=JsonRpcError(code=-32603, message="API rate limit exceeded"),
    )
    _same_shape(failed.to_wire(), SEP_FAILED)


def test_cancelled_and_unlimited_tasks_render_without_payload_fields() -> None:
    wire = task(status=TaskStatus.CANCELLED, ttl=None, poll_interval=None).to_wire()
    assert wire == {
        "taskId": SEP_WORKING["taskId"],
        "status": "cancelled",
        "createdAt": "2025-11-25T10:30:00.000Z",
        "lastUpdatedAt": "2025-11-25T10:50:00.000Z",
        "ttlMs": None,
    }


def test_timestamps_render_in_utc_with_milliseconds() -> None:
    eastern = timezone(timedelta(hours=-5))
    made = task(
        created_at=datetime(2025, 11, 25, 5, 30, 0, 123456, tzinfo=eastern),
        last_updated_at=datetime(2025, 11, 25, 10, 30, 1, tzinfo=UTC),
    )
    assert made.created_at.tzinfo is UTC
    assert made.to_wire()["createdAt"] == "2025-11-25T10:30:00.123Z"


@pytest.mark.parametrize(
    "changes",
    [
        {"status": TaskStatus.INPUT_REQUIRED},  # no input requests
        {"input_requests": {"k": ELICIT}},  # requests while working
        {"status": TaskStatus.COMPLETED},  # completed without result
        {"result": {"x": 1}},  # result while working
        {"status": TaskStatus.FAILED},  # failed without error
        {"status": TaskStatus.COMPLETED, "result": {}, "error": JsonRpcError(code=1, message="x")},
        {"status": TaskStatus.CANCELLED, "result": {"x": 1}},
        {"last_updated_at": T0 - timedelta(milliseconds=1)},
        {"ttl": timedelta(0)},
        {"ttl": timedelta(milliseconds=-5)},
        {"ttl": timedelta(microseconds=1500)},
        {"poll_interval": timedelta(microseconds=1)},
        {"task_id": "abc\r\ndef"},
        {"task_id": "abc\n"},
        {"task_id": ""},
        {"created_at": datetime(2025, 1, 1)},  # naive
        {"origin": '{"tool":"x"}'},
    ],
)
def test_task_invariants_are_enforced(changes: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        task(**changes)


def test_task_is_frozen_and_its_repr_hides_secrets() -> None:
    secret = TaskOrigin.from_persisted_string('{"api_key":"s3cr3t"}')
    made = task(
        status=TaskStatus.COMPLETED,
        result={"token": "r3sult"},
        origin=secret,
        metadata={"m": "m3ta"},
    )
    with pytest.raises(pydantic.ValidationError):
        setattr(made, "status", TaskStatus.FAILED)  # noqa: B010
    for hidden in ("s3cr3t", "r3sult", "m3ta"):
        assert hidden not in repr(made)
        assert hidden not in str(made)
    failed = task(status=TaskStatus.FAILED, error=JsonRpcError(code=1, message="m", data="d4ta"))
    assert "d4ta" not in repr(failed)
    asking = task(
        status=TaskStatus.INPUT_REQUIRED,
        input_requests={
            "k": InputRequest(method="elicitation/create", params={"message": "pr0mpt"})
        },
    )
    assert "pr0mpt" not in repr(asking)


def test_status_enum_and_terminal_set() -> None:
    assert [s.value for s in TaskStatus] == [
        "working",
        "input_required",
        "completed",
        "failed",
        "cancelled",
    ]
    assert {s for s in TaskStatus if s.is_terminal} == TERMINAL_STATUSES
    assert TaskStatus("working") is TaskStatus.WORKING


@pytest.mark.parametrize(
    ("request_", "answer"),
    [
        (ELICIT, ELICIT_ANSWER),
        (ELICIT, {"action": "decline"}),
        (ELICIT, {"action": "cancel"}),
        (SAMPLE, SAMPLE_ANSWER),
        (SAMPLE, {"role": "assistant", "content": [{"type": "text", "text": "x"}], "model": "m"}),
        (ROOTS, ROOTS_ANSWER),
        (ROOTS, {"roots": []}),
    ],
)
def test_input_request_matches_its_own_variant(request_: InputRequest, answer: Any) -> None:
    assert request_.matches(answer)
    others = [r for r in (ELICIT, SAMPLE, ROOTS) if r.method != request_.method]
    assert not any(other.matches(answer) for other in others)


@pytest.mark.parametrize(
    "answer",
    [
        None,
        "accept",
        [],
        {},
        {"action": "yes"},
        {"action": "accept", "content": "x"},
        {"role": "robot", "content": {"type": "text"}, "model": "m"},
        {"role": "user", "content": {"type": "text"}},
        {"role": "user", "content": [], "model": "m"},
        {"roots": [{"name": "no uri"}]},
        {"roots": "x"},
    ],
)
def test_malformed_answers_match_no_request(answer: Any) -> None:
    assert not any(r.matches(answer) for r in (ELICIT, SAMPLE, ROOTS))


def test_input_request_refuses_unknown_methods() -> None:
    with pytest.raises(pydantic.ValidationError):
        InputRequest(method="tools/call", params={})  # type: ignore[arg-type]


def test_json_rpc_error_wire_form() -> None:
    assert JsonRpcError(code=-32602, message="bad").to_wire() == {"code": -32602, "message": "bad"}
    assert JsonRpcError(code=1, message="m", data=[1]).to_wire() == {
        "code": 1,
        "message": "m",
        "data": [1],
    }
    with pytest.raises(pydantic.ValidationError):
        JsonRpcError(code=True, message="m")
