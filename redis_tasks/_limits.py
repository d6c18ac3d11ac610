"""Configurable bounds on everything a task stores, and retention defaults."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from ._origin import DEFAULT_MAX_ORIGIN_BYTES, DEFAULT_MAX_ORIGIN_DEPTH

__all__ = ["MAX_CREATE_RATE", "MAX_TENANT_WEIGHT", "MIN_CREATE_RATE", "Limits"]

_KIB = 1024
_MIB = 1024 * _KIB
#: The most a weight may be (the scheduler's stride is 720,720 // weight: at 1,000 it is 720,
#: and the floor costs any weight under 0.14 % of its share).
MAX_TENANT_WEIGHT = 1000
#: Bounds of a tenant's create rate, creates a second (the GCRA counts microseconds).
MIN_CREATE_RATE = 1e-3
MAX_CREATE_RATE = 1e6


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on task data and retention; every manager validates input against one.

    Retention: ``create_task(ttl=None)`` uses ``default_ttl``; a task is kept
    forever only when the configuration says so with ``default_ttl=None`` (which
    requires ``max_ttl=None``). An explicit ``ttl`` above ``max_ttl`` is refused.

    Sizes are UTF-8 bytes for text and encoded bytes for JSON values. Input over
    a bound raises :class:`LimitExceededError` and stores nothing.

    Tenants (:mod:`redis_tasks._tenancy`): every task counts against one, by
    default its binding. ``max_open_tasks_per_tenant`` caps a tenant's tasks that
    are not terminal (a task that ends or expires frees its place), and
    ``tenant_create_rate`` (creates a second, ``tenant_create_burst`` at once;
    default burst: the rate rounded up) bounds how fast it creates them; both
    refuse with :class:`QuotaExceededError` and store nothing.
    ``max_running_tasks_per_tenant`` caps how many of a tenant's tasks run at once
    across the whole worker fleet. With any of the three set, a tenant's tasks all
    live in its home partition, where one script sees them all (exact on a
    cluster too); a tenant's load is then bounded by what one partition (one
    cluster node) serves. ``max_tenant_weight`` bounds ``create_task(weight=)``.
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
    max_tenant_bytes: int = 256
    max_tenant_weight: int = 100
    max_open_tasks_per_tenant: int | None = None
    max_running_tasks_per_tenant: int | None = None
    tenant_create_rate: float | None = None
    tenant_create_burst: int | None = None

    @property
    def tenant_scoped(self) -> bool:
        """Whether a limit counts per tenant: then a tenant's tasks share its home partition."""
        return (
            self.max_open_tasks_per_tenant is not None
            or self.max_running_tasks_per_tenant is not None
            or self.tenant_create_rate is not None
        )

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
            "max_tenant_bytes",
            "max_tenant_weight",
        ):
            if not _positive_int(getattr(self, name)):
                raise ValueError(f"Limits.{name} must be a positive int")
        for name in (
            "max_open_tasks_per_tenant",
            "max_running_tasks_per_tenant",
            "tenant_create_burst",
        ):
            value = getattr(self, name)
            if value is not None and not _positive_int(value):
                raise ValueError(f"Limits.{name} must be a positive int or None")
        if self.max_tenant_weight > MAX_TENANT_WEIGHT:
            raise ValueError(f"Limits.max_tenant_weight must be at most {MAX_TENANT_WEIGHT}")
        rate = self.tenant_create_rate
        if rate is not None and (
            isinstance(rate, bool)
            or not isinstance(rate, int | float)
            or not MIN_CREATE_RATE <= rate <= MAX_CREATE_RATE
        ):
            raise ValueError(
                f"Limits.tenant_create_rate must be {MIN_CREATE_RATE} to {MAX_CREATE_RATE:,} "
                "creates a second, or None"
            )
        if self.tenant_create_burst is not None and rate is None:
            raise ValueError("Limits.tenant_create_burst needs tenant_create_rate")
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
