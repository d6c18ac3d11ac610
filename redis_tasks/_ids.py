"""Task IDs: 144 random bits from ``secrets`` plus the partition they live in.

Format: ``<partition>.<24 URL-safe base64 characters>``, e.g. ``7.q3Zk...``. The
partition travels inside the ID, so a manager finds the task's keys however
many partitions it is configured with today.

On a server without authentication the ID is the only thing that guards a task
(whoever holds it reads the result, answers input requests, cancels): it is a
capability. Logs, spans and pages name a task by its *reference* instead
(:func:`task_ref`): the partition and the first :data:`REF_CHARS` characters of
the random part, e.g. ``11.Wt0jM9``. Its 36 bits tell tasks apart in a log and
match a task with ``redis-tasks inspect``; the 108 bits it leaves out are far
too many to guess.
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
    "REF_CHARS",
    "new_task_id",
    "parse_task_id",
    "parse_task_ref",
    "task_ref",
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
#: How many characters of the random part a task reference keeps: 36 bits.
REF_CHARS: Final = 6
_PARTITION = rf"(0|[1-9][0-9]{{0,{PARTITION_DIGITS - 1}}})"
_RANDOM = rf"[{''.join(ALPHABET_RANGES)}{re.escape(ALPHABET_OTHERS)}]"
_TASK_ID = re.compile(rf"{_PARTITION}\.{_RANDOM}{{{RANDOM_CHARS}}}")
# A reference, or any longer prefix of an ID short of the whole.
_TASK_REF = re.compile(rf"{_PARTITION}\.({_RANDOM}{{1,{RANDOM_CHARS - 1}}})")


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


def task_ref(task_id: str, *, whole: bool = False) -> str:
    """How logs, spans and pages name the task ``task_id``: its reference (see the
    module), or the ID itself with ``whole`` (for deployments where every task is
    bound to an authenticated principal, so that the ID alone reaches nothing).

    Anything that is not an ID is cut the same way (at most the first
    :data:`PARTITION_DIGITS` characters before the first dot and
    :data:`REF_CHARS` after it), so no caller can pass a whole ID through by
    mistake, a malformed one included.
    """
    if whole:
        return task_id
    head, dot, rest = task_id.partition(".")
    return f"{head[:PARTITION_DIGITS]}{dot}{rest[:REF_CHARS]}"


def parse_task_ref(text: object) -> tuple[int, str] | None:
    """The partition and the start of the random part that ``text`` names, when it is
    a task reference or any longer prefix of a task ID short of the whole one (at
    least one character after the dot); ``None`` for anything else."""
    if not isinstance(text, str) or len(text) >= PARTITION_DIGITS + 1 + RANDOM_CHARS:
        return None
    match = _TASK_REF.fullmatch(text)
    if match is None:
        return None
    partition = int(match.group(1))
    return (partition, match.group(2)) if partition < MAX_PARTITIONS else None
