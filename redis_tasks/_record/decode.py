"""Decoding the stored record: the snapshot a client sees, answers and origins.

A record that does not decode is never handed out as if valid (:func:`decode_task`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import pydantic

from redis_tasks._errors import InternalError, ValidationError
from redis_tasks._json import unpack
from redis_tasks._models import INPUT_METHODS, InputMethod, InputRequest, JsonRpcError, Task
from redis_tasks._origin import TaskOrigin
from redis_tasks._status import TaskStatus

__all__ = ["created_task", "decode_answers", "decode_origin", "decode_requests", "decode_task"]

_METHOD_BY_KIND: Final[dict[str, InputMethod]] = {
    kind: method for method, kind in INPUT_METHODS.items()
}
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8")


def _instant(value: bytes | None) -> datetime:
    if value is None:
        raise ValueError("missing timestamp")
    return _EPOCH + timedelta(milliseconds=int(value))


def _duration(value: bytes | None) -> timedelta | None:
    ms = int(value) if value else 0
    return timedelta(milliseconds=ms) if ms > 0 else None


def created_task(
    task_id: str, now_ms: int, ttl_ms: int, poll_ms: int, origin: TaskOrigin, metadata: bytes
) -> Task:
    """The snapshot of a task just created, built without reading it back."""
    created = _EPOCH + timedelta(milliseconds=now_ms)
    return Task(
        task_id=task_id,
        status=TaskStatus.WORKING,
        created_at=created,
        last_updated_at=created,
        ttl=timedelta(milliseconds=ttl_ms) if ttl_ms else None,
        poll_interval=timedelta(milliseconds=poll_ms) if poll_ms else None,
        origin=origin,
        metadata=unpack(metadata) if metadata else {},
    )


def decode_requests(pairs: Sequence[bytes]) -> dict[str, InputRequest]:
    """Decode a flat ``key, kind+body, ...`` list of outstanding requests."""
    requests = {}
    for i in range(0, len(pairs), 2):
        raw = pairs[i + 1]
        method = _METHOD_BY_KIND[chr(raw[0])]
        requests[pairs[i].decode("utf-8")] = InputRequest(method=method, params=unpack(raw[1:]))
    return requests


def decode_answers(pairs: Sequence[bytes]) -> dict[str, Any]:
    """Decode a flat ``key, answer, ...`` list of recorded answers."""
    return {pairs[i].decode("utf-8"): unpack(pairs[i + 1]) for i in range(0, len(pairs), 2)}


# Origins this small are remembered after decoding: a task polled again and again
# is decoded once. The bound keeps the cache under about 8 MiB.
_CACHED_ORIGIN_BYTES: Final = 4096


def decode_origin(stored: bytes) -> TaskOrigin:
    """The origin stored at create, exactly (its bounds were checked then)."""
    if len(stored) <= _CACHED_ORIGIN_BYTES:
        return _decode_small_origin(stored)
    return _decode_origin(stored)


def _decode_origin(stored: bytes) -> TaskOrigin:
    return TaskOrigin.from_persisted_string(
        stored.decode("utf-8"), max_bytes=len(stored), max_depth=10_000
    )


# TaskOrigin is immutable, so one decoded instance may be shared by every Task.
_decode_small_origin: Final = functools.lru_cache(maxsize=1024)(_decode_origin)


def decode_task(task_id: str, fields: Sequence[bytes | None], requests: Sequence[bytes]) -> Task:
    """Build a validated :class:`Task` from :data:`~.fields.SNAPSHOT_FIELDS` values.

    A record that does not decode, or whose payload does not fit its status,
    raises :class:`InternalError`: it is never handed out as if valid.
    """
    try:
        st, sm, ca, ua, ttl, pi, origin, result, error, metadata = fields
        if st is None or origin is None:
            raise ValueError("incomplete record")
        result_value = None if result is None else unpack(result)
        metadata_value = unpack(metadata) if metadata else {}
        if not isinstance(result_value, dict | None) or not isinstance(metadata_value, dict):
            raise TypeError("result and metadata must be JSON objects")
        # Every field value below is built by a decoder of this module, so it has
        # the type and form the model's field validators would check (aware UTC
        # instants, whole positive milliseconds, validated input requests and
        # error); what depends on the stored data as a whole is checked by the
        # model's own invariant check. Skipping the rest halves the cost of a
        # snapshot, which every tasks/get pays.
        task = Task.model_construct(
            task_id=task_id,
            status=TaskStatus(st.decode()),
            status_message=_text(sm),
            created_at=_instant(ca),
            last_updated_at=_instant(ua),
            ttl=_duration(ttl),
            poll_interval=_duration(pi),
            origin=decode_origin(origin),
            input_requests=decode_requests(requests),
            result=result_value,
            error=None if error is None else JsonRpcError.model_validate(unpack(error)),
            metadata=metadata_value,
        )
        return task.check_invariants()
    except (
        ValueError,
        KeyError,
        IndexError,
        TypeError,
        pydantic.ValidationError,
        ValidationError,
    ) as exc:
        raise InternalError("stored task failed validation") from exc
