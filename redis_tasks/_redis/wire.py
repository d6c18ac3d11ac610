"""Commands on the wire: RESP-encoded by hand, written straight to a connection.

The auto-pipeline (:mod:`.pipeline`), the kept blocking readers (:mod:`.rawio`) and
the shard tail (:mod:`.shard_tail`) send packed commands; this is the one encoder
and the one raw write they share.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError

__all__ = ["pack", "write"]


def pack(commands: Sequence[Sequence[Any]]) -> bytes:
    """RESP-encode ``commands`` (arguments: ``bytes``, ``str`` or ``int``) as one write.

    Our arguments are only ever these three types, so this is a few times faster
    than redis-py's general packer, which the per-call profile showed to matter.
    """
    parts: list[bytes] = []
    append = parts.append
    for command in commands:
        append(b"*%d\r\n" % len(command))
        for arg in command:
            kind = type(arg)  # exact types first: the common case, and the fast one
            if kind is str:
                data = arg.encode()
            elif kind is bytes:
                data = arg
            elif kind is int:
                data = b"%d" % arg
            else:
                data = _encode_subclass(arg)
            append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(parts)


def _encode_subclass(arg: object) -> bytes:
    """A subclass of ``str``, ``bytes`` or ``int`` (an enum member, say)."""
    if isinstance(arg, str):
        return arg.encode()
    if isinstance(arg, bytes):
        return bytes(arg)
    if isinstance(arg, int) and not isinstance(arg, bool):
        return b"%d" % arg
    raise TypeError(f"cannot send a {type(arg).__name__} to Redis")


async def write(connection: Any, data: bytes) -> None:
    """Write ``data`` (packed commands) to ``connection``, connecting it if needed.

    Straight to the connection's stream writer: redis-py's ``send_packed_command``
    wraps every write in ``asyncio.wait_for``, which starts a task per write (a
    busy worker writes tens of thousands of times a second), and every write of
    ours is already bounded by a deadline of its own (a batch's, or a blocking
    read's). The private ``_writer`` (there since redis-py 4.2) is looked up
    defensively: without it the public path is taken.
    """
    writer = getattr(connection, "_writer", None)
    if writer is None:
        await connection.send_packed_command(data, check_health=False)
        return
    transport = getattr(writer, "transport", None)
    if transport is not None and transport.is_closing():
        # A closing transport drops writes silently: fail now, not at the deadline.
        await connection.disconnect(nowait=True)
        raise RedisConnectionError("the connection is closed")
    try:
        writer.writelines((data,))
        await writer.drain()
    except OSError as exc:
        await connection.disconnect(nowait=True)
        raise RedisConnectionError("Error while writing to the socket") from exc
