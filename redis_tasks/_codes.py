"""Script return codes and the one table that maps them to exceptions.

Every Lua script answers ``{code, ...}``. The loader injects these codes into
each script as ``RC_<NAME>`` constants, so Python and Lua cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from enum import IntEnum

from ._errors import (
    InputKeyReusedError,
    InternalError,
    LeaseLostError,
    QuotaExceededError,
    RedisTasksError,
    TaskNotFoundError,
    TaskTerminalError,
)

__all__ = ["ReturnCode", "error_for"]


class ReturnCode(IntEnum):
    """Outcome codes shared by every script."""

    OK = 0
    NOT_FOUND = 1
    LEASE_LOST = 2
    TERMINAL = 3
    KEY_REUSED = 4
    EXISTS = 5
    # Outcomes of claim that settle a task instead of running it (not errors).
    CANCELLED = 6
    POISONED = 7
    LEASE_HELD = 8
    #: A task of a tenant at its concurrency cap went back to its tenant's queue.
    DEFERRED = 9
    # Refusals of create by a tenant's limit (nothing stored).
    QUOTA = 10
    RATE = 11


def _key_reused(detail: bytes | None) -> RedisTasksError:
    # Input-request keys are chosen by the application and shown to clients,
    # so naming the key is safe and helps find the offending handler.
    key = detail.decode("utf-8", "replace") if detail is not None else "?"
    return InputKeyReusedError(f"input request key {key!r} was already used for another request")


def _exists(_: bytes | None) -> RedisTasksError:
    # A generated ID that already exists means 144 random bits collided or the
    # random source is broken; neither is the caller's fault.
    return InternalError("task ID collision")


def _quota(_: bytes | None) -> RedisTasksError:
    return QuotaExceededError("the tenant's open-task quota is full", reason="quota")


def _rate(detail: bytes | None) -> RedisTasksError:
    # The script's detail is the wait in whole milliseconds (never the tenant).
    try:
        wait = timedelta(milliseconds=max(1, int(detail or b"1")))
    except ValueError:
        wait = timedelta(milliseconds=1)
    return QuotaExceededError(
        "the tenant creates tasks faster than its rate", reason="rate", retry_after=wait
    )


_ERRORS: dict[ReturnCode, Callable[[bytes | None], RedisTasksError]] = {
    ReturnCode.NOT_FOUND: lambda _: TaskNotFoundError(),
    ReturnCode.LEASE_LOST: lambda _: LeaseLostError(),
    ReturnCode.TERMINAL: lambda _: TaskTerminalError(),
    ReturnCode.KEY_REUSED: _key_reused,
    ReturnCode.EXISTS: _exists,
    ReturnCode.QUOTA: _quota,
    ReturnCode.RATE: _rate,
}


def error_for(code: int, detail: bytes | None = None) -> RedisTasksError:
    """Return the exception for a non-OK script return ``code``."""
    try:
        factory = _ERRORS[ReturnCode(code)]
    except (ValueError, KeyError):
        return InternalError("unexpected script reply")
    return factory(detail)
