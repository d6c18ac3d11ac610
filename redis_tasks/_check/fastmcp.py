"""What ``check`` says of a prefix's FastMCP servers: whether they seal their callers.

Read from the key ID they record at start (:mod:`redis_tasks.fastmcp._key_check`):
``none`` means callers' access tokens and headers are kept in Redis in clear.
"""

from __future__ import annotations

from .report import Finding

__all__ = ["snapshot_key"]


def snapshot_key(recorded: bytes | None) -> list[Finding]:
    """The finding for the key ID the prefix's servers recorded; none where none did."""
    if recorded is None:
        return []
    if recorded == b"none":
        return [
            Finding(
                "warn",
                "snapshot key",
                "this prefix's FastMCP servers keep callers' access tokens and headers in "
                "Redis in clear (no snapshot key)",
                "set the same $REDIS_TASKS_SNAPSHOT_KEY on every server and worker",
            )
        ]
    return [
        Finding(
            "ok",
            "snapshot key",
            "this prefix's FastMCP servers seal callers with a snapshot key",
            data={"key_id": recorded.decode(errors="replace")},
        )
    ]
