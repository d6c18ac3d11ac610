"""The stored task record: validating and encoding input, decoding snapshots.

Both backends store a task as the same flat record of byte strings (a Redis
hash, or a dict in memory), and both validate every input here before they
touch storage, so bad input stores nothing on either backend.

The record's fields are :data:`RECORD_FIELDS` (short names keep Redis memory and
script arguments small); the Lua scripts' field names are checked against that
table when they are loaded (``redis_tasks/_redis/scripts.py``).

In Redis, the long fields (:data:`LONG_FIELDS`) of ``PIECE_BYTES + 1`` to
``PIECE_BYTES * MAX_PIECES`` bytes (65 to 512) are stored in pieces (``or``,
``or+1``, ...), so that the hash stays a listpack under Redis's default
``hash-max-listpack-value``; the scripts join them (``lua/includes/common.lua``,
which gets these three as generated constants), and what a script returns is
the whole value.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import pydantic

from ._errors import InternalError, LimitExceededError, ValidationError
from ._json import canonical, pack, unpack, utf8_size
from ._limits import Limits
from ._models import (
    INPUT_METHODS,
    InputMethod,
    InputRequest,
    JsonRpcError,
    RequestContext,
    Task,
    response_kinds,
)
from ._origin import TaskOrigin
from ._status import TaskStatus

__all__ = [
    "LONG_FIELDS",
    "MAX_PIECES",
    "PIECE_BYTES",
    "RECORD_FIELDS",
    "SNAPSHOT_FIELDS",
    "EncodedAnswer",
    "EncodedRequest",
    "Encoder",
    "created_task",
    "decode_answers",
    "decode_origin",
    "decode_task",
]

#: Every field of the stored record (a Redis hash, or a dict in memory), by name.
RECORD_FIELDS: Final[dict[str, str]] = {
    "st": "status",
    "sm": "status message (absent: none)",
    "ca": "created at (ms, server clock)",
    "ua": "last updated at (ms, server clock, never decreasing; absent: as ca)",
    "ttl": "retention in ms (0: unlimited)",
    "ex": "expires at (ms; absent: never)",
    "pi": "poll interval in ms (0: none)",
    "bd": "binding digest: the endpoint and partition key (Redis)",
    "ep": "endpoint (in memory)",
    "pk": 'binding (in memory): "-" anonymous, "=<partition key>" otherwise',
    "or": "origin (exact UTF-8 bytes)",
    "pl": "payload (bytes; dropped when terminal)",
    "md": "metadata (msgpack, optional)",
    "rs": "result (msgpack)",
    "er": "error (msgpack)",
    "cx": '"1" once cancellation was requested',
    "fn": "fence: the lease generation (absent: 0, never claimed)",
    "wk": "the work-stream entry ID (dropped when terminal)",
    "at": "attempts: how many claims ran the task (Redis)",
    "ld": "lease deadline (ms, server clock; dropped when terminal; Redis)",
    "lo": "lease owner: the holder's consumer name (dropped when terminal; Redis)",
    "op": "the operation ID of the unfenced call that ended the task (absent: none)",
    "tp": "W3C trace context of the creating span (absent: none; dropped when terminal)",
    "tn": "tenant: the digest of the tenant the task counts against (never its key; "
    "dropped when terminal)",
    "oq": '"1" while the task counts against its tenant\'s open-task quota (absent: no quota)',
    "tc": "its tenant's concurrency cap while the task may run (absent: none)",
}
#: The fields a Redis record may keep in pieces (see the module docstring).
LONG_FIELDS: Final = frozenset({"sm", "or", "pl", "md", "rs", "er", "tp"})
#: The size of one piece of a long field, and the most pieces a value is kept in.
PIECE_BYTES: Final = 64
MAX_PIECES: Final = 8
#: The record fields a snapshot is decoded from, in the order scripts return them.
SNAPSHOT_FIELDS: Final = ("st", "sm", "ca", "ua", "ttl", "pi", "or", "rs", "er", "md")
_METHOD_BY_KIND: Final[dict[str, InputMethod]] = {
    kind: method for method, kind in INPUT_METHODS.items()
}
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MS: Final = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class EncodedRequest:
    """An input request ready for storage: key, fingerprint, kind-prefixed body."""

    key: bytes
    fingerprint: bytes
    body: bytes


@dataclass(frozen=True, slots=True)
class EncodedAnswer:
    """A client answer ready for storage, with the request kinds it can answer."""

    key: bytes
    kinds: bytes
    body: bytes


def _ms(value: object, what: str) -> int:
    if not isinstance(value, timedelta):
        raise ValidationError(f"{what} must be a timedelta")
    if value <= timedelta(0) or value % _MS:
        raise ValidationError(f"{what} must be a positive whole number of milliseconds")
    return value // _MS


class Encoder:
    """Validates input against :class:`Limits` and encodes it for the record."""

    __slots__ = ("limits",)

    def __init__(self, limits: Limits) -> None:
        self.limits = limits

    def _text(self, value: object, what: str, max_bytes: int) -> bytes:
        if not isinstance(value, str):
            raise ValidationError(f"{what} must be a str")
        if utf8_size(value, what) > max_bytes:
            raise LimitExceededError(f"{what} exceeds {max_bytes} bytes")
        return value.encode("utf-8")

    def binding(self, request: RequestContext) -> tuple[bytes, bytes]:
        """The endpoint and encoded partition binding of ``request``."""
        if not isinstance(request, RequestContext):
            raise ValidationError("request must be a RequestContext")
        limits = self.limits
        endpoint = self._text(request.endpoint, "endpoint", limits.max_endpoint_bytes)
        if request.partition_key is None:
            return endpoint, b"-"
        key = self._text(request.partition_key, "partition key", limits.max_partition_key_bytes)
        return endpoint, b"=" + key

    def status_message(self, message: object) -> bytes | None:
        """The encoded status message, or ``None`` for no message."""
        if message is None:
            return None
        return self._text(message, "status message", self.limits.max_status_message_bytes)

    @staticmethod
    def fence(fence: object) -> bytes:
        """The fence argument: empty when unfenced."""
        if fence is None:
            return b""
        # Fences come from HINCRBY, so a valid one fits a signed 64-bit integer;
        # bounding it also keeps str() off a 10,000-digit int (a ValueError).
        if not isinstance(fence, int) or isinstance(fence, bool) or not 0 <= fence < 2**63:
            raise ValidationError("fence must be an int in [0, 2**63)")
        return str(fence).encode()

    def ttl_ms(self, ttl: object) -> int:
        """Retention in ms; 0 means unlimited (only by configuration)."""
        limits = self.limits
        if ttl is None:
            return 0 if limits.default_ttl is None else limits.default_ttl // _MS
        ms = _ms(ttl, "ttl")
        if limits.max_ttl is not None and ms > limits.max_ttl // _MS:
            raise LimitExceededError("ttl exceeds the configured maximum")
        return ms

    def poll_ms(self, poll_interval: object) -> int:
        """Poll interval in ms; 0 means none is suggested."""
        if poll_interval is None:
            default = self.limits.default_poll_interval
            return 0 if default is None else default // _MS
        return _ms(poll_interval, "poll_interval")

    def payload(self, payload: object) -> bytes:
        """The work payload, opaque bytes."""
        if not isinstance(payload, bytes | bytearray | memoryview):
            raise ValidationError("payload must be bytes")
        data = bytes(payload)
        if len(data) > self.limits.max_payload_bytes:
            raise LimitExceededError(f"payload exceeds {self.limits.max_payload_bytes} bytes")
        return data

    def origin(self, origin: object) -> bytes:
        """The origin's exact persisted bytes."""
        if not isinstance(origin, TaskOrigin):
            raise ValidationError("origin must be a TaskOrigin")
        max_bytes = self.limits.max_origin_bytes
        return self._text(origin.to_persisted_string(), "origin", max_bytes)

    def metadata(self, metadata: object) -> bytes:
        """Application metadata as msgpack; empty when there is none."""
        if metadata is None:
            return b""
        if not isinstance(metadata, Mapping):
            raise ValidationError("metadata must be a JSON object")
        if not metadata:
            return b""
        return self._pack(dict(metadata), self.limits.max_metadata_bytes, "metadata")

    def _pack(self, value: Any, max_bytes: int, what: str) -> bytes:
        return pack(value, max_bytes=max_bytes, max_depth=self.limits.max_json_depth, what=what)

    def result(self, result: object) -> bytes:
        """A completed task's result: a JSON object."""
        if not isinstance(result, dict):
            raise ValidationError("result must be a JSON object (dict)")
        return self._pack(result, self.limits.max_result_bytes, "result")

    def error(self, error: object) -> bytes:
        """A failed task's JSON-RPC error."""
        if not isinstance(error, JsonRpcError):
            raise ValidationError("error must be a JsonRpcError")
        return self._pack(error.to_wire(), self.limits.max_error_bytes, "error")

    def _input_key(self, key: object) -> bytes:
        if not isinstance(key, str) or not key:
            raise ValidationError("input keys must be non-empty str")
        return self._text(key, "input key", self.limits.max_input_key_bytes)

    def _round_size(self, count: int, what: str) -> None:
        limit = self.limits.max_input_requests_per_round
        if count > limit:
            raise LimitExceededError(f"more than {limit} {what} in one round")

    def input_requests(self, requests: object) -> list[EncodedRequest]:
        """Validate one round of input requests (key -> :class:`InputRequest`)."""
        if not isinstance(requests, Mapping) or not requests:
            raise ValidationError("requests must be a non-empty mapping of key to InputRequest")
        self._round_size(len(requests), "input requests")
        encoded = []
        for key, request in requests.items():
            if not isinstance(request, InputRequest):
                raise ValidationError("each input request must be an InputRequest")
            body = self._pack(request.params, self.limits.max_input_request_bytes, "input request")
            # The fingerprint covers the canonical request so that re-issuing an
            # equal request is recognised however its params were ordered.
            fingerprint = hashlib.blake2b(
                request.method.encode() + b"\0" + _canonical_params(request),
                digest_size=16,
            ).hexdigest()
            encoded.append(
                EncodedRequest(
                    self._input_key(key), fingerprint.encode(), request.kind.encode() + body
                )
            )
        return encoded

    def input_responses(self, responses: object) -> list[EncodedAnswer]:
        """Validate client answers; drop those that answer no request variant."""
        if not isinstance(responses, Mapping):
            raise ValidationError("input_responses must be a mapping")
        self._round_size(len(responses), "input responses")
        encoded = []
        for key, response in responses.items():
            encoded_key = self._input_key(key)
            body = self._pack(response, self.limits.max_input_response_bytes, "input response")
            kinds = response_kinds(response)
            if kinds:  # an answer of no known variant can match nothing: ignored
                encoded.append(EncodedAnswer(encoded_key, kinds.encode(), body))
        return encoded


def _canonical_params(request: InputRequest) -> bytes:
    return canonical(request.params).encode("utf-8")


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
    """Build a validated :class:`Task` from :data:`SNAPSHOT_FIELDS` values.

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
