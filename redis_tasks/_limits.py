"""Configurable bounds on everything a task stores, and retention defaults."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from ._origin import DEFAULT_MAX_ORIGIN_BYTES, DEFAULT_MAX_ORIGIN_DEPTH

__all__ = ["Limits"]

_KIB = 1024
_MIB = 1024 * _KIB


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on task data and retention; every manager validates input against one.

    Retention: ``create_task(ttl=None)`` uses ``default_ttl``; a task is kept
    forever only when the configuration says so with ``default_ttl=None`` (which
    requires ``max_ttl=None``). An explicit ``ttl`` above ``max_ttl`` is refused.

    Sizes are UTF-8 bytes for text and encoded bytes for JSON values. Input over
    a bound raises :class:`LimitExceededError` and stores nothing.
    """

    max_endpoint_bytes: int = 256
    max_partition_key_bytes: int = 256
    max_origin_bytes: int = DEFAULT_MAX_ORIGIN_BYTES
    max_origin_depth: int = DEFAULT_MAX_ORIGIN_DEPTH
    max_payload_bytes: int = 1 * _MIB
    max_result_bytes: int = 1 * _MIB
    max_error_bytes: int = 64 * _KIB
    max_metadata_bytes: int = 16 * _KIB
    max_status_message_bytes: int = 4 * _KIB
    max_input_requests_per_round: int = 16
    max_input_key_bytes: int = 128
    max_input_request_bytes: int = 64 * _KIB
    max_input_response_bytes: int = 256 * _KIB
    max_json_depth: int = 64
    default_ttl: timedelta | None = timedelta(hours=1)
    max_ttl: timedelta | None = timedelta(days=1)
    default_poll_interval: timedelta | None = timedelta(seconds=1)

    def __post_init__(self) -> None:
        for name in (
            "max_endpoint_bytes",
            "max_partition_key_bytes",
            "max_origin_bytes",
            "max_origin_depth",
            "max_payload_bytes",
            "max_result_bytes",
            "max_error_bytes",
            "max_metadata_bytes",
            "max_status_message_bytes",
            "max_input_requests_per_round",
            "max_input_key_bytes",
            "max_input_request_bytes",
            "max_input_response_bytes",
            "max_json_depth",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Limits.{name} must be a positive int")
        for name in ("default_ttl", "max_ttl", "default_poll_interval"):
            duration = getattr(self, name)
            if duration is not None and duration <= timedelta(0):
                raise ValueError(f"Limits.{name} must be positive or None")
        if self.default_ttl is None and self.max_ttl is not None:
            raise ValueError("an unlimited default_ttl needs max_ttl=None")
        if (
            self.default_ttl is not None
            and self.max_ttl is not None
            and self.default_ttl > self.max_ttl
        ):
            raise ValueError("default_ttl must not exceed max_ttl")
