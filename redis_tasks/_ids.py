"""Task IDs: 144 random bits from ``secrets`` plus the partition they live in.

Format: ``<partition>.<24 URL-safe base64 characters>``, e.g. ``7.q3Zk...``. The
partition travels inside the ID, so a manager finds the task's keys however
many partitions it is configured with today.
"""

from __future__ import annotations

import re
import secrets
from typing import Final

__all__ = [
    "ALPHABET_OTHERS",
    "ALPHABET_RANGES",
    "MAX_PARTITIONS",
    "PARTITION_DIGITS",
    "RANDOM_CHARS",
    "new_task_id",
    "parse_task_id",
]

#: Upper bound on partitions (Redis Cluster has 16,384 slots; more buys nothing).
MAX_PARTITIONS: Final = 16384
#: The most digits a partition number has (it has no leading zeros).
PARTITION_DIGITS: Final = len(str(MAX_PARTITIONS - 1))
_RANDOM_BYTES: Final = 18  # 144 bits, a whole number of base64 characters
#: How many characters the random part has: base64 of the random bytes, unpadded.
RANDOM_CHARS: Final = _RANDOM_BYTES * 4 // 3
#: The random part's alphabet, URL-safe base64: these ranges and these other characters.
#: The Lua scripts check IDs with a pattern generated from this definition
#: (``redis_tasks/_redis/scripts.py``), so both accept the same IDs.
ALPHABET_RANGES: Final = ("A-Z", "a-z", "0-9")
ALPHABET_OTHERS: Final = "_-"
_TASK_ID = re.compile(
    rf"(0|[1-9][0-9]{{0,{PARTITION_DIGITS - 1}}})\."
    rf"[{''.join(ALPHABET_RANGES)}{re.escape(ALPHABET_OTHERS)}]{{{RANDOM_CHARS}}}"
)


def new_task_id(partitions: int, partition: int | None = None) -> str:
    """Generate a fresh task ID in ``partition``, or in a uniformly chosen partition
    below ``partitions`` (a tenant with per-tenant limits has a home partition)."""
    if partition is None:
        partition = secrets.randbelow(partitions)
    return f"{partition}.{secrets.token_urlsafe(_RANDOM_BYTES)}"


def parse_task_id(task_id: object) -> int | None:
    """Return the partition of a well-formed task ID, or ``None`` for anything else."""
    if not isinstance(task_id, str) or len(task_id) > PARTITION_DIGITS + 1 + RANDOM_CHARS:
        return None
    match = _TASK_ID.fullmatch(task_id)
    if match is None:
        return None
    partition = int(match.group(1))
    return partition if partition < MAX_PARTITIONS else None
