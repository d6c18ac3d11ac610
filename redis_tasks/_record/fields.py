"""The stored record's fields: their names, what each holds, which are stored in pieces.

Both backends store a task as the same flat record of byte strings (a Redis hash,
or a dict in memory) with the fields of :data:`RECORD_FIELDS`, whose short names
keep Redis memory and script arguments small. Python names a field by its constant
(``FIELD_FENCE``, not ``"fn"``); the Lua scripts spell the names out, and every
field-like literal in them is checked against :data:`RECORD_FIELDS` when they are
loaded (``redis_tasks/_redis/lua_source.py``).

In Redis, the long fields (:data:`LONG_FIELDS`) of ``PIECE_BYTES + 1`` to
``PIECE_BYTES * MAX_PIECES`` bytes (65 to 512) are stored in pieces (``or``,
``or+1``, ...), so that the hash stays a listpack under Redis's default
``hash-max-listpack-value``; the scripts join them (``lua/includes/common.lua``,
which gets these three as generated constants), and what a script returns is
the whole value.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "FIELD_ATTEMPTS",
    "FIELD_BINDING",
    "FIELD_BINDING_DIGEST",
    "FIELD_CANCEL_REQUESTED",
    "FIELD_CLAIM_THAT_ENDED",
    "FIELD_CREATED_AT",
    "FIELD_ENDPOINT",
    "FIELD_ERROR",
    "FIELD_EXPIRES_AT",
    "FIELD_FENCE",
    "FIELD_LEASE_DEADLINE",
    "FIELD_LEASE_OWNER",
    "FIELD_MESSAGE",
    "FIELD_METADATA",
    "FIELD_OPEN_QUOTA",
    "FIELD_OPERATION",
    "FIELD_ORIGIN",
    "FIELD_PARKED",
    "FIELD_PARKS",
    "FIELD_PAYLOAD",
    "FIELD_POLL_INTERVAL",
    "FIELD_RESULT",
    "FIELD_STATUS",
    "FIELD_TENANT",
    "FIELD_TENANT_CAP",
    "FIELD_TRACE_CONTEXT",
    "FIELD_TTL",
    "FIELD_UPDATED_AT",
    "FIELD_WORK_ENTRY",
    "LONG_FIELDS",
    "MAX_PIECES",
    "PIECE_BYTES",
    "RECORD_FIELDS",
    "SNAPSHOT_FIELDS",
]

FIELD_STATUS: Final = "st"
FIELD_MESSAGE: Final = "sm"
FIELD_CREATED_AT: Final = "ca"
FIELD_UPDATED_AT: Final = "ua"
FIELD_TTL: Final = "ttl"
FIELD_EXPIRES_AT: Final = "ex"
FIELD_POLL_INTERVAL: Final = "pi"
FIELD_BINDING_DIGEST: Final = "bd"
FIELD_ENDPOINT: Final = "ep"
FIELD_BINDING: Final = "pk"
FIELD_ORIGIN: Final = "or"
FIELD_PAYLOAD: Final = "pl"
FIELD_METADATA: Final = "md"
FIELD_RESULT: Final = "rs"
FIELD_ERROR: Final = "er"
FIELD_CANCEL_REQUESTED: Final = "cx"
FIELD_FENCE: Final = "fn"
FIELD_WORK_ENTRY: Final = "wk"
FIELD_ATTEMPTS: Final = "at"
FIELD_LEASE_DEADLINE: Final = "ld"
FIELD_LEASE_OWNER: Final = "lo"
FIELD_OPERATION: Final = "op"
FIELD_TRACE_CONTEXT: Final = "tp"
FIELD_TENANT: Final = "tn"
FIELD_OPEN_QUOTA: Final = "oq"
FIELD_TENANT_CAP: Final = "tc"
FIELD_CLAIM_THAT_ENDED: Final = "ce"
FIELD_PARKED: Final = "pw"
FIELD_PARKS: Final = "np"

#: Every field of the stored record (a Redis hash, or a dict in memory), by name.
RECORD_FIELDS: Final[dict[str, str]] = {
    FIELD_STATUS: "status",
    FIELD_MESSAGE: "status message (absent: none)",
    FIELD_CREATED_AT: "created at (ms, server clock)",
    FIELD_UPDATED_AT: "last updated at (ms, server clock, never decreasing; absent: as ca)",
    FIELD_TTL: "retention in ms (0: unlimited)",
    FIELD_EXPIRES_AT: "expires at (ms; absent: never)",
    FIELD_POLL_INTERVAL: "poll interval in ms (0: none)",
    FIELD_BINDING_DIGEST: "binding digest: the endpoint and partition key (Redis)",
    FIELD_ENDPOINT: "endpoint (in memory)",
    FIELD_BINDING: 'binding (in memory): "-" anonymous, "=<partition key>" otherwise',
    FIELD_ORIGIN: "origin (exact UTF-8 bytes)",
    FIELD_PAYLOAD: "payload (bytes; dropped when terminal)",
    FIELD_METADATA: "metadata (msgpack, optional)",
    FIELD_RESULT: "result (msgpack)",
    FIELD_ERROR: "error (msgpack)",
    FIELD_CANCEL_REQUESTED: '"1" once cancellation was requested',
    FIELD_FENCE: "fence: the lease generation (absent: 0, never claimed)",
    FIELD_WORK_ENTRY: "the work-stream entry ID (dropped when terminal)",
    FIELD_ATTEMPTS: "attempts: how many claims ran the task (Redis)",
    FIELD_LEASE_DEADLINE: "lease deadline (ms, server clock; dropped when terminal; Redis)",
    FIELD_LEASE_OWNER: "lease owner: the holder's consumer name (dropped when terminal; Redis)",
    FIELD_OPERATION: "the operation ID of the unfenced call that ended the task (absent: none)",
    FIELD_TRACE_CONTEXT: "W3C trace context of the creating span (absent: none; dropped when "
    "terminal)",
    FIELD_TENANT: "tenant: the digest of the tenant the task counts against (never its key; "
    "dropped when terminal)",
    FIELD_OPEN_QUOTA: '"1" while the task counts against its tenant\'s open-task quota '
    "(absent: no quota)",
    FIELD_TENANT_CAP: "its tenant's concurrency cap while the task may run (absent: none)",
    FIELD_CLAIM_THAT_ENDED: '"<work entry> <consumer>" of the claim that ended the task '
    "(cancelled or poisoned), so that its retry is answered the same (absent: none)",
    FIELD_PARKED: '"1" while the task is parked: it waits for its client\'s input and no worker '
    "holds it (absent: not parked)",
    FIELD_PARKS: "how many times the task was parked (absent: never)",
}
#: The fields a Redis record may keep in pieces (see the module docstring).
LONG_FIELDS: Final = frozenset(
    {
        FIELD_MESSAGE,
        FIELD_ORIGIN,
        FIELD_PAYLOAD,
        FIELD_METADATA,
        FIELD_RESULT,
        FIELD_ERROR,
        FIELD_TRACE_CONTEXT,
    }
)
#: The size of one piece of a long field, and the most pieces a value is kept in.
PIECE_BYTES: Final = 64
MAX_PIECES: Final = 8
#: The record fields a snapshot is decoded from, in the order scripts return them.
SNAPSHOT_FIELDS: Final = (
    FIELD_STATUS,
    FIELD_MESSAGE,
    FIELD_CREATED_AT,
    FIELD_UPDATED_AT,
    FIELD_TTL,
    FIELD_POLL_INTERVAL,
    FIELD_ORIGIN,
    FIELD_RESULT,
    FIELD_ERROR,
    FIELD_METADATA,
)
