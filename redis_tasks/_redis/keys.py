"""Key naming: the one place that knows how redis-tasks lays out Redis keys.

Every key carries its partition's hash tag, so that a task's keys and its
partition's streams share one Redis Cluster slot and each script touches a
single slot::

    {rt:7.42}:task:<id>        hash: the task record
    {rt:7.42}:task:<id>:req    hash: outstanding input requests (key -> kind + request)
    {rt:7.42}:task:<id>:iss    hash: every input key ever issued (key -> fingerprint)
    {rt:7.42}:task:<id>:ans    hash: accepted answers the worker has not taken yet
    {rt:7.42}:task:<id>:jrn    hash: the answer journal (every accepted answer)
    {rt:7.42}:g:<digest>       string "1": exists iff the binding whose digest (with the task ID)
                               names it may see the task
    {rt:7.42}:work             stream + consumer group ``workers``: tasks to run (those
                               an idle worker's read picks up), and doorbells
    {rt:7.42}:leases           sorted set: tasks a batch claim took straight from their
                               tenant's queue (no work entry), by lease deadline
    {rt:7.42}:events           stream, MAXLEN ~ bounded: one task-ID entry per change
    {rt:7.42}:signals          stream, MAXLEN ~ bounded: one task-ID entry per change a
                               running task's worker must see (a cancellation asked,
                               answers accepted, an outcome written by another caller)
    {rt:7.42}:stats            hash: terminal transitions by status, a pickup histogram
                               (the counters ``redis-tasks inspect`` reads), and each
                               worker's last batch claim (``claim:<consumer>``)
    {rt:7.42}:busy             string "1", PX: a worker serving the partition had every
                               handler slot taken lately (creates then signal newcomers)
    {rt:7.42}:ring             sorted set: tenants with tasks waiting, by pass (fair dispatch)
    {rt:7.42}:parked           sorted set: tenants at their concurrency cap, by when to look again
    {rt:7.42}:tenants          hash: a waiting tenant's settings ("<weight> <cap>"), if not default
    {rt:7.42}:tq:<tenant>      list: the tenant's waiting task IDs, oldest first
    {rt:7.42}:run:<tenant>     sorted set: a capped tenant's running task IDs, by lease deadline
    {rt:7.42}:open:<tenant>    sorted set: a tenant's open task IDs, by expiry (with a quota)
    {rt:7.42}:rate:<tenant>    string: a tenant's GCRA arrival time in µs (with a rate)
    {rt:7.42}:waiting          sorted set: the partition's parked tasks (waiting for their
                               client's input, held by no worker), by expiry
    {rt:7.42}:wt:<tenant>      sorted set: a tenant's parked tasks, by expiry
    {rt:fastmcp}:key-id        string, no expiry: the ID of the snapshot key the prefix's
                               FastMCP servers seal callers with, or "none"
                               (:mod:`redis_tasks.fastmcp._key_check`)

``<tenant>`` is the tenant's digest (:mod:`redis_tasks._tenancy`), never its key.

The tag of partition ``p`` is ``{<prefix>:<p>.<s>}`` for the smallest ``s`` whose
slot falls in a 64-slot window at the bit-reversed position of ``p``: partitions
0, 1, 2, 3... land at slots near 0, 8192, 4096, 12288..., so any number of
partitions is spread evenly over the slot space, and the 16 default ones over a
cluster's primaries (6/5/5 on three). Every process computes the same tags.

Every task key expires at ``created + ttl``; the three streams and the stats hash
are per-partition infrastructure (:data:`PARTITION_SUFFIXES`), bounded by
acknowledgement (work), by MAXLEN (events, signals) and by a fixed set of fields
(stats: its counts, and a claim record per live worker).
So are the ring, parked set and tenants hash that order the tenant queues
(:data:`TENANT_SUFFIXES`): a tenant leaves them when its queue empties or is
found gone. A tenant queue (:data:`QUEUE_INFIX`) expires with the last of its
tasks, so it goes whether or not a worker ever meets them; the run, open and
rate keys of a tenant expire with what they count, and so do the sets of parked
tasks (:data:`WAITING_SUFFIX`, :data:`WAITING_INFIX`).
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from typing import Final

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from redis_tasks._ids import MAX_PARTITIONS, parse_task_id

__all__ = [
    "ANSWERS_SUFFIX",
    "BUSY_SUFFIX",
    "DIRECT_ENTRY",
    "EVENTS_SUFFIX",
    "GRANT_INFIX",
    "ISSUED_SUFFIX",
    "JOURNAL_SUFFIX",
    "LEASES_SUFFIX",
    "OPEN_INFIX",
    "PARKED_SUFFIX",
    "PARTITION_SUFFIXES",
    "PLAN_INFIX",
    "QUEUE_INFIX",
    "RATE_INFIX",
    "REFUSED_INFIX",
    "REQUESTS_SUFFIX",
    "RING_SUFFIX",
    "RUN_INFIX",
    "SEEN_SUFFIX",
    "STATS_SUFFIX",
    "TASK_INFIX",
    "TENANTS_SUFFIX",
    "TENANT_INFIXES",
    "TENANT_SUFFIXES",
    "WAITING_INFIX",
    "WAITING_SUFFIX",
    "WORK_GROUP",
    "WORK_SUFFIX",
    "KeySpace",
    "TaskKeys",
    "TenantKeys",
]

#: The consumer group every worker reads the work streams through.
WORK_GROUP: Final = "workers"
#: The ``wk`` of a task a batch claim took straight from its tenant's queue: it has
#: no work entry, its lease is in the partition's lease set (``:leases``). A valid
#: stream ID no ``XADD *`` ever makes, so code that takes ``wk`` for an entry (an
#: older worker's ``XACK``/``XDEL``) finds nothing and changes nothing.
DIRECT_ENTRY: Final = "0-1"

# What follows the partition's hash tag in each key name (see the module docstring).
# The scripts get them as generated constants (KEY_TASK, KEY_REQUESTS...), so a
# script that names a task's keys itself (claim_next) names them the same way.
#: Between the tag and the task ID.
TASK_INFIX: Final = ":task:"
#: After a task's record key: outstanding requests, issued keys, answers, the journal.
REQUESTS_SUFFIX: Final = ":req"
ISSUED_SUFFIX: Final = ":iss"
ANSWERS_SUFFIX: Final = ":ans"
JOURNAL_SUFFIX: Final = ":jrn"
#: Between the tag and a grant's digest.
GRANT_INFIX: Final = ":g:"
#: After the tag: the partition's streams.
WORK_SUFFIX: Final = ":work"
EVENTS_SUFFIX: Final = ":events"
SIGNALS_SUFFIX: Final = ":signals"
STATS_SUFFIX: Final = ":stats"
#: After the tag: the leases of tasks claimed with no work entry, by deadline.
LEASES_SUFFIX: Final = ":leases"
#: After the tag: whether a worker serving the partition is saturated (it expires).
BUSY_SUFFIX: Final = ":busy"
#: After the tag: the fair-dispatch ring, the parked tenants, the tenant settings,
#: and the index of tenants seen (with a plan to keep, or refused) in the last day.
RING_SUFFIX: Final = ":ring"
PARKED_SUFFIX: Final = ":parked"
TENANTS_SUFFIX: Final = ":tenants"
SEEN_SUFFIX: Final = ":seen"
TENANT_SUFFIXES: Final = (RING_SUFFIX, PARKED_SUFFIX, TENANTS_SUFFIX, SEEN_SUFFIX)
#: Between the tag and a tenant's digest: its queue, run set, open set, rate state,
#: the terms of its plan, and its refused creates by reason.
QUEUE_INFIX: Final = ":tq:"
RUN_INFIX: Final = ":run:"
OPEN_INFIX: Final = ":open:"
RATE_INFIX: Final = ":rate:"
PLAN_INFIX: Final = ":plan:"
REFUSED_INFIX: Final = ":refused:"
#: After the tag: the partition's parked tasks (waiting for input, held by no worker);
#: between the tag and a tenant's digest: that tenant's. Both by expiry.
WAITING_SUFFIX: Final = ":waiting"
WAITING_INFIX: Final = ":wt:"
#: Every tenant key's infix (what ``redis-tasks tenants`` scans for).
TENANT_INFIXES: Final = (
    QUEUE_INFIX,
    RUN_INFIX,
    OPEN_INFIX,
    RATE_INFIX,
    PLAN_INFIX,
    REFUSED_INFIX,
    WAITING_INFIX,
)
#: The suffixes of a partition's lasting keys: the only keys with no expiry.
PARTITION_SUFFIXES: Final = (
    WORK_SUFFIX,
    EVENTS_SUFFIX,
    SIGNALS_SUFFIX,
    STATS_SUFFIX,
    LEASES_SUFFIX,
    *TENANT_SUFFIXES,
)
_PREFIX = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def _digest(person: bytes, task_id: str, endpoint: bytes, binding: bytes, size: int) -> str:
    """BLAKE2b of the length-prefixed task ID, endpoint and binding (so distinct triples
    never join into the same bytes), personalised per use, as base64url text (readable
    in a key name and in redis-cli)."""
    tid = task_id.encode()
    material = len(tid).to_bytes(2, "big") + tid + len(endpoint).to_bytes(4, "big") + endpoint
    digest = hashlib.blake2b(material + binding, digest_size=size, person=person).digest()
    return base64.urlsafe_b64encode(digest).decode()


@dataclass(frozen=True, slots=True)
class TaskKeys:
    """All keys of one task, in the order the scripts' headers use."""

    task: str
    grant_prefix: str  # the partition's tag and ":g:"; the grant key adds a digest
    task_id: str
    partition: int
    requests: str
    issued: str
    answers: str
    journal: str
    work: str
    events: str
    signals: str
    stats: str

    def grant(self, endpoint: bytes, binding: bytes) -> str:
        """The key whose existence authorizes ``(endpoint, binding)`` on this task.

        Named by a digest of the task ID and the binding, so a client that may not
        see the task looks up a key that does not exist, exactly as for an unknown
        task: the two cost Redis the same work (benchmarks/timing_side_channel.py).
        72 bits (12 base64url characters) keep the name within a smaller allocation
        (a name is stored once per task: 16 bytes a task); a collision alone opens
        nothing, since the record's own check is an independent digest
        (:meth:`binding_digest`).
        """
        return self.grant_prefix + self.grant_digest(endpoint, binding)

    def grant_digest(self, endpoint: bytes, binding: bytes) -> str:
        """The part of :meth:`grant`'s key after :attr:`grant_prefix`: what a batch
        of creates sends, its script putting the prefix before it."""
        return _digest(b"rt-grant", self.task_id, endpoint, binding, 9)

    def binding_digest(self, endpoint: bytes, binding: bytes) -> str:
        """What the record keeps (``bd``) instead of the endpoint and partition key, and
        each client-facing script compares with the caller's: 96 bits, 16 characters."""
        return _digest(b"rt-binding", self.task_id, endpoint, binding, 12)


@dataclass(frozen=True, slots=True)
class TenantKeys:
    """The keys of one tenant in one partition, and the partition's tenant keys."""

    ring: str
    tenants: str
    queue: str
    open: str
    rate: str
    plan: str
    refused: str
    seen: str
    waiting: str


_SLOT_BITS: Final = 14  # 16384 slots
_WINDOW: Final = 64


def _target_slot(partition: int) -> int:
    """Bit-reversed ``partition``: 0, 8192, 4096, 12288, 2048, ..."""
    return int(f"{partition:0{_SLOT_BITS}b}"[::-1], 2)


class KeySpace:
    """Names the keys of one prefix."""

    __slots__ = ("_tags", "prefix")

    def __init__(self, prefix: str) -> None:
        if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
            # Braces or colons in a prefix would break the hash tag or let one
            # prefix's ACL pattern (~{rt:*) cover another's keys.
            raise ValueError("prefix must be 1-64 characters of A-Z a-z 0-9 _ . -")
        self.prefix = prefix
        self._tags: dict[int, str] = {}

    @property
    def snapshot_key_id(self) -> str:
        """Where the prefix's FastMCP servers record the ID of their snapshot key."""
        return f"{{{self.prefix}:fastmcp}}:key-id"

    def tag(self, partition: int) -> str:
        """The hash tag of ``partition`` (see the module docstring)."""
        tag = self._tags.get(partition)
        if tag is None:
            if not 0 <= partition < MAX_PARTITIONS:
                raise ValueError("partition out of range")
            target = _target_slot(partition)
            for salt in range(REDIS_CLUSTER_HASH_SLOTS * 64):
                candidate = f"{{{self.prefix}:{partition}.{salt}}}"
                offset = (key_slot(candidate.encode()) - target) % REDIS_CLUSTER_HASH_SLOTS
                if offset < _WINDOW:
                    tag = candidate
                    break
            else:  # pragma: no cover - CRC16 covers every window within a few thousand tries
                raise RuntimeError("no hash tag found")
            self._tags[partition] = tag
        return tag

    def slot(self, partition: int) -> int:
        """The Redis Cluster slot every key of ``partition`` lives in."""
        return key_slot(self.tag(partition).encode())

    def of_task(self, task_id: str) -> TaskKeys | None:
        """Every key of ``task_id``, in the partition its ID names; ``None`` for an ID
        that names none (a malformed ID is an unknown task, never an error)."""
        partition = parse_task_id(task_id)
        return None if partition is None else self.task(partition, task_id)

    def task(self, partition: int, task_id: str) -> TaskKeys:
        """Every key of the task ``task_id`` stored in ``partition``."""
        tag = self.tag(partition)
        base = tag + TASK_INFIX + task_id
        return TaskKeys(
            task=base,
            grant_prefix=tag + GRANT_INFIX,
            task_id=task_id,
            partition=partition,
            requests=base + REQUESTS_SUFFIX,
            issued=base + ISSUED_SUFFIX,
            answers=base + ANSWERS_SUFFIX,
            journal=base + JOURNAL_SUFFIX,
            work=tag + WORK_SUFFIX,
            events=tag + EVENTS_SUFFIX,
            signals=tag + SIGNALS_SUFFIX,
            stats=tag + STATS_SUFFIX,
        )

    def work(self, partition: int) -> str:
        """The work stream of ``partition``."""
        return self.tag(partition) + WORK_SUFFIX

    def leases(self, partition: int) -> str:
        """The lease set of ``partition``: tasks claimed with no work entry, scored by
        lease deadline (what a reclaim takes over once the deadline passed)."""
        return self.tag(partition) + LEASES_SUFFIX

    def events(self, partition: int) -> str:
        """The event stream of ``partition``."""
        return self.tag(partition) + EVENTS_SUFFIX

    def signals(self, partition: int) -> str:
        """The signal stream of ``partition``: the changes workers listen for."""
        return self.tag(partition) + SIGNALS_SUFFIX

    def stats(self, partition: int) -> str:
        """The stats hash of ``partition`` (counters the scripts keep for inspection)."""
        return self.tag(partition) + STATS_SUFFIX

    def tenant(self, partition: int, digest: str) -> TenantKeys:
        """The keys of the tenant with ``digest`` in ``partition`` (see the module)."""
        tag = self.tag(partition)
        return TenantKeys(
            ring=tag + RING_SUFFIX,
            tenants=tag + TENANTS_SUFFIX,
            queue=tag + QUEUE_INFIX + digest,
            open=tag + OPEN_INFIX + digest,
            rate=tag + RATE_INFIX + digest,
            plan=tag + PLAN_INFIX + digest,
            refused=tag + REFUSED_INFIX + digest,
            seen=tag + SEEN_SUFFIX,
            waiting=tag + WAITING_INFIX + digest,
        )

    def busy(self, partition: int) -> str:
        """The mark a saturated worker serving ``partition`` keeps (it expires)."""
        return self.tag(partition) + BUSY_SUFFIX

    def waiting(self, partition: int) -> str:
        """The parked tasks of ``partition`` (waiting for input, held by no worker)."""
        return self.tag(partition) + WAITING_SUFFIX

    def ring(self, partition: int) -> str:
        """The ring of ``partition``'s tenants with tasks waiting."""
        return self.tag(partition) + RING_SUFFIX

    def parked(self, partition: int) -> str:
        """The parked tenants of ``partition`` (at their concurrency cap)."""
        return self.tag(partition) + PARKED_SUFFIX

    def is_partition_key(self, key: str) -> bool:
        """Whether ``key`` is one of a partition's lasting keys (streams, stats and the
        fair-dispatch ring, parked set and tenants hash); a tenant's keys expire."""
        if TASK_INFIX in key or QUEUE_INFIX in key:
            return False
        return key.endswith(PARTITION_SUFFIXES)

    def pattern(self) -> str:
        """A ``SCAN MATCH`` / ACL key pattern covering every key of this prefix."""
        return f"{{{self.prefix}:*"
