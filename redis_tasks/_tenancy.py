"""Tenants: whom a task counts against, for fair dispatch, quotas, rates and caps.

MCP servers are multi-user, so one user's flood must not delay everyone else's
tasks by the whole backlog, and no user may hold Redis. Every task therefore
counts against one *tenant*: by default its binding (the endpoint and partition
key it was created with; the anonymous tasks of one endpoint share one tenant),
or whatever ``create_task(tenant=...)`` names (an organisation, a plan). A
tenant is known by a digest of its key (:func:`tenant_digest`), never the key: the
key is as private as a partition key, and no key, log, metric or message holds it.

**Fair dispatch** (``lua/includes/tenants.lua``). When nothing waits in a
partition, a new task's work goes straight into the partition's work stream,
where a blocked worker gets it at once (the pickup path is unchanged). Otherwise
it joins the tail of its tenant's queue (a list per tenant and partition), and
the tenant, if it was not waiting, joins the partition's *ring*: a sorted set of
the tenants with tasks waiting, scored by their *pass*. A worker's batch claim
(``claim_next``) reads what the stream holds, then dispatches the rest of its
batch from the ring: each task goes to the tenant of lowest pass, whose pass then
grows by ``STRIDE_UNIT / weight`` (stride scheduling, as Temporal's matching
service does it), so tenants are served in weighted round-robin and each
tenant's tasks in arrival order; a tenant alone gets every worker. A tenant that
starts waiting joins at the partition's *virtual time*, the pass the last task
dispatched started at (start-time fair queuing), plus a jitter below its stride
(:func:`jitter`, uncorrelated between partitions, so that tenants joining together
are not served in the same order in every partition): it is served within one
round, before the tenant that was served last, and since no pass is remembered
once a tenant stops waiting, none can be banked. A tenant that joins a ring where
others wait (a *newcomer*) is also signalled by its create, and a busy worker starts
its task at its next free slot, ahead of the partitions' turns and the ring's order
(see ``redis_tasks/_worker/intake.py``). The stream and its consumer group stay the
delivery and lease record: a dispatched task gets its work entry and is claimed
in the same script, with the same fence, lease and reclaim as before.

The cost, measured by ``redis-tasks bench`` (docs/guides/tenants.md): a waiting task is
an ``RPUSH`` at create instead of an ``XADD``, and an ``XADD`` at dispatch; a
batch adds a handful of commands to read and update the ring.

**Limits** (the tenant's plan: :mod:`redis_tasks._plans`; by default the
per-tenant fields of :class:`~redis_tasks.Limits`), checked in the create script before
anything is written: a quota of open (not terminal) tasks per tenant, kept as a
sorted set of the tenant's open task IDs scored by expiry, so a task that ends
leaves it and one that expires stops counting with no sweeper; and a create rate
(GCRA: one arrival time per tenant, in µs, with a burst). A refusal raises
:class:`~redis_tasks.QuotaExceededError` and stores nothing. A concurrency cap
per tenant bounds its tasks running at once across the whole fleet: a capped
tenant's running tasks form a set scored by lease deadline (a dead worker's lease
stops counting when it runs out); a claim past the cap puts the task back at the
head of its queue and *parks* the tenant, out of the ring, so its waiting tasks
hold nobody back, until one of its tasks ends or its soonest lease runs out.
With any of these limits, a tenant's tasks all live in its *home partition*
(:func:`home_partition`): one script then sees all of them, so a quota and a cap
are exact on a cluster too. The price: one tenant's load is bounded by what one
partition (one cluster node) serves, which limits of this kind bound anyway.
"""

from __future__ import annotations

import base64
import hashlib
import math
from dataclasses import dataclass
from typing import Final

from ._errors import LimitExceededError, ValidationError
from ._json import utf8_size
from ._limits import Limits
from ._plans import PlanTerms

__all__ = [
    "DIGEST_CHARS",
    "GOLDEN",
    "JITTER_PRIME",
    "JITTER_SALT",
    "STRIDE_UNIT",
    "VTIME_FIELD",
    "Admission",
    "Head",
    "admission",
    "home_partition",
    "jitter",
    "plan_picks",
    "stride",
    "tenant_digest",
]

#: A tenant's pass grows by ``STRIDE_UNIT // weight`` a dispatch. 720,720 (the least
#: common multiple of 1 to 16) divides by every weight up to 16 exactly, and rounds
#: any weight up to ``MAX_TENANT_WEIGHT`` (1,000) by less than 0.14 % of its share
#: (the floor loses under one unit of a stride of at least 720); 5,040 gave weight
#: 850 a stride of 5, 19 % too much, and weights 631 to 720 one share. Passes stay
#: exact integers in a sorted set's double for about 1.2e10 dispatches of one
#: partition at weight 1 (2^53 / 720,720).
STRIDE_UNIT: Final = 720_720
#: The jitter's hash (see :func:`jitter`): a prime below 2**26, so that squaring it
#: stays exact in a Lua number (a double), and a constant it adds.
JITTER_PRIME: Final = 67_108_859
JITTER_SALT: Final = 40_503
#: The golden ratio's fractional part: each partition turns a tenant's place by it.
GOLDEN: Final = 0.6180339887498949
#: The field of a partition's tenants hash that keeps its virtual time: the pass the
#: last task dispatched started at. No tenant digest (base64url) contains ':'.
VTIME_FIELD: Final = ":vtime"
#: Characters of a tenant digest (72 bits, base64url): in key names and records.
DIGEST_CHARS: Final = 12
_DIGEST_BYTES: Final = DIGEST_CHARS * 3 // 4
_PERSON: Final = b"rt-tenant"


def tenant_digest(endpoint: bytes, binding: bytes, tenant: bytes | None) -> str:
    """The digest that stands for a tenant: of the key the application named, or else
    of the binding (endpoint and encoded partition key). Length-prefixed and tagged,
    so a named tenant never shares a digest with a binding."""
    if tenant is not None:
        material = b"t" + tenant
    else:
        material = b"b" + len(endpoint).to_bytes(4, "big") + endpoint + binding
    digest = hashlib.blake2b(material, digest_size=_DIGEST_BYTES, person=_PERSON).digest()
    return base64.urlsafe_b64encode(digest).decode()


def home_partition(digest: str, partitions: int) -> int:
    """The partition all of a tenant's tasks live in when a limit counts per tenant."""
    raw = base64.urlsafe_b64decode(digest)
    return int.from_bytes(raw[:4], "big") % partitions


def stride(weight: int) -> int:
    """How far one dispatch moves a tenant of ``weight`` in the ring."""
    return STRIDE_UNIT // weight


def jitter(tenant: str, partition: int, stride: int) -> int:
    """Where ``tenant`` lands past the partition's virtual time when it joins
    ``partition``'s ring, in ``[0, stride)``: the twin of ``jitter()`` in
    ``lua/includes/tenants.lua`` (the same double arithmetic, so the same result).

    A hash of the tenant gives it a place in [0, 1) (a polynomial hash, then three
    squarings modulo a prime below 2**26), which each partition turns by the golden
    ratio: tenants that join together are served in a different order in each
    partition, and each tenant is early in about as many partitions as it is late
    (a low-discrepancy sequence). One order in every ring would serve a tenant in
    every partition before the next anywhere; independent random orders would still
    favour some tenants by chance (Jain's index 0.93 where this gives 0.97 to 0.99 in
    ``redis-tasks bench fairness``).
    """
    value = 0
    for byte in tenant.encode():
        value = (value * 31 + byte) % JITTER_PRIME
    for _ in range(3):
        value = (value * value + JITTER_SALT) % JITTER_PRIME
    return math.floor(((value / JITTER_PRIME + partition * GOLDEN) % 1) * stride)


@dataclass(slots=True)
class Head:
    """A tenant at the ring's head that may run a task now, as a dispatch plans it
    (``runnable_head`` in ``lua/includes/tenants.lua``)."""

    name: str
    #: Its pass: where it stands in the ring (after :func:`plan_picks`, after its picks).
    pass_: int
    stride: int
    #: How many tasks it may start: its cap's room, else the batch.
    room: int
    #: How many tasks wait in its queue: a dispatch takes no more.
    queued: int
    capped: bool
    #: How many of the batch's dispatches it gets (set by :func:`plan_picks`).
    picks: int = 0


def plan_picks(heads: list[Head], count: int) -> int | None:
    """How ``count`` dispatches fall among ``heads`` (in pass order): each to the head
    of lowest pass with room and tasks left (a tie: the first), whose pass then
    grows by its stride. Sets each head's ``picks`` and ``pass_``; returns the pass
    the last pick started at (the new virtual time), or ``None`` for none.

    The twin of ``plan_picks`` in ``lua/includes/tenants.lua``; one table of cases
    drives both (``tests/contract/test_dispatch_plan.py``). ``count`` heads are
    enough: every head has room and a task, so a head is picked only after every
    head before it was, and ``count`` picks reach at most ``count`` heads.
    """
    for head in heads:
        head.picks = 0
    started = None
    for _ in range(count):
        best = None
        for head in heads:
            picks = head.picks
            if (
                picks < head.room
                and picks < head.queued
                and (best is None or head.pass_ < best.pass_)
            ):
                best = head
        if best is None:
            break
        best.picks += 1
        started = best.pass_
        best.pass_ += best.stride
    return started


@dataclass(frozen=True, slots=True)
class Admission:
    """What a create tells its script about the task's tenant: who it is and which of
    its limits apply (0 where none does)."""

    #: The tenant's digest (:func:`tenant_digest`).
    tenant: str
    #: ``"<weight> <cap>"``, or ``""`` for weight 1 and no cap.
    settings: str
    #: The fleet-wide cap on the tenant's running tasks.
    cap: int
    #: The tenant's open-task quota.
    max_open: int
    #: The GCRA's emission interval (µs a create) and tolerance (burst - 1 intervals).
    rate_us: int
    burst_us: int
    #: Whether the task must live in the tenant's home partition.
    home: bool
    #: The plan's terms to keep for operators (:attr:`~._plans.PlanTerms.text`).
    plan: str = ""


def admission(
    limits: Limits, endpoint: bytes, binding: bytes, tenant: object, terms: PlanTerms
) -> Admission:
    """Validate ``create_task``'s ``tenant`` against ``limits``, and apply the tenant's
    checked plan ``terms`` (:func:`~redis_tasks._plans.plan_terms`).

    Raises :class:`ValidationError` (a tenant that is not a ``str``) or
    :class:`LimitExceededError` (a tenant key over ``max_tenant_bytes``); the
    messages never hold the tenant key.
    """
    key: bytes | None = None
    if tenant is not None:
        if not isinstance(tenant, str):
            raise ValidationError("tenant must be a str or None")
        if utf8_size(tenant, "tenant") > limits.max_tenant_bytes:
            raise LimitExceededError(f"tenant exceeds {limits.max_tenant_bytes} bytes")
        key = tenant.encode("utf-8")
    weight, cap = terms.weight, terms.cap
    return Admission(
        tenant=tenant_digest(endpoint, binding, key),
        settings=f"{weight} {cap}" if weight != 1 or cap or terms.named else "",
        cap=cap,
        max_open=terms.max_open,
        rate_us=terms.rate_us,
        burst_us=terms.burst_us,
        home=terms.home,
        plan=terms.text,
    )
