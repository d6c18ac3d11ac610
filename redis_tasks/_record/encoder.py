"""Validating and encoding input for the stored record, once, before either backend
touches storage: bad input stores nothing on either backend."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from redis_tasks._errors import LimitExceededError, ValidationError
from redis_tasks._json import canonical, pack, utf8_size
from redis_tasks._limits import Limits
from redis_tasks._models import InputRequest, JsonRpcError, RequestContext, response_kinds
from redis_tasks._origin import TaskOrigin

__all__ = ["EncodedAnswer", "EncodedRequest", "Encoder", "request_fingerprint"]

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
            encoded.append(
                EncodedRequest(
                    self._input_key(key), request_fingerprint(request), request.kind.encode() + body
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


def request_fingerprint(request: InputRequest) -> bytes:
    """What an issued input key records of its request (hex of a 16-byte BLAKE2b): the
    canonical request, so re-issuing an equal one is recognised however its params
    were ordered, and a key reused for another is refused."""
    canonical_params = canonical(request.params).encode("utf-8")
    return (
        hashlib.blake2b(request.method.encode() + b"\0" + canonical_params, digest_size=16)
        .hexdigest()
        .encode()
    )
