"""What a claim on a task's work entry did (the lease protocol's vocabulary)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from ._models import JsonRpcError
from ._origin import TaskOrigin

__all__ = ["INTERNAL_ERROR", "Claim", "ClaimOutcome"]

#: The error a task fails with when its handler crashed or was poison: generic on
#: purpose, so nothing about the cause reaches the client.
INTERNAL_ERROR = JsonRpcError(code=-32603, message="Internal error")


class ClaimOutcome(Enum):
    """How a claim ended."""

    RUN = "run"  #: the worker holds the lease and runs the handler
    EXPIRED = "expired"  #: the task is gone (TTL): its entry was dropped
    TERMINAL = "terminal"  #: already completed, failed or cancelled: entry dropped
    CANCELLED = "cancelled"  #: cancellation requested while nobody ran it: ended cancelled
    POISONED = "poisoned"  #: attempts exhausted: ended failed with an internal error
    LEASE_HELD = "lease_held"  #: another worker's lease is still valid: nothing changed
    DEFERRED = "deferred"  #: its tenant is at its concurrency cap: back in the tenant's queue


@dataclass(frozen=True, slots=True)
class Claim:
    """The result of :meth:`WorkQueue.claim` (and of each claim of ``claim_next``)."""

    outcome: ClaimOutcome
    fence: int = 0
    attempt: int = 0
    origin: TaskOrigin | None = field(default=None, repr=False)
    payload: bytes = field(default=b"", repr=False)
    #: The W3C trace context stored when the task was created (empty: none).
    trace_context: bytes = field(default=b"", repr=False)
    #: Whether tasks were waiting in the partition's tenant queues when this claim ran:
    #: the worker should claim the next batch rather than block (single claims only).
    backlog: bool = False
    #: The claim ended its task (``CANCELLED``, ``POISONED``) or started it (``RUN``)
    #: but fewer replicas than ``wait_replicas`` confirmed that write in time (a
    #: started task was held for its replica as long as a third of its lease allows):
    #: a failover may roll it back, and the task is then claimed again, or, if its
    #: create was not confirmed either, is gone. Only the claims that wrote are
    #: unconfirmed; the others of the same batch stand as they are.
    unconfirmed: bool = False
    #: How many times the task was parked (given back while it waited for its
    #: client's input) before this claim: more than 0 when this run resumes it.
    parks: int = 0
    #: For a run that replays its rounds (resumed, or after a lost lease): the
    #: answers recorded for them, ``(key, request fingerprint, packed answer)``, so an
    #: answered round returns without a call; empty for a first run.
    recorded: tuple[tuple[bytes, bytes, bytes], ...] = field(default=(), repr=False)
