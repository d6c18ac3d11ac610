"""Whether an object can be used as the fast path uses it: the shape checks of
:mod:`._sdk`, which know nothing of the SDK themselves.

Each returns what is wrong (one line for :class:`._sdk.SdkMismatchError`'s
message), or ``None``. A part is named as a message names it (``where``) beside
the object itself, :data:`MISSING` when the SDK no longer has it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any, Final

__all__ = [
    "MISSING",
    "Part",
    "found",
    "headers",
    "keeps",
    "public",
    "qualified",
    "release_in",
    "seconds",
    "takes",
]

#: Where a part was looked for and not found.
MISSING: Final = object()
#: A part of the SDK, and the name it goes by in a message.
Part = tuple[str, object]


def release_in(version: str | None, lowest: tuple[int, ...], below: tuple[int, ...]) -> bool:
    """Whether ``version``'s release numbers (2.3.1rc1 is 2.3.1) are at least ``lowest`` and
    below ``below``."""
    match = re.match(r"\d+(?:\.\d+)*", version or "")
    if match is None:
        return False
    release = tuple(int(part) for part in match.group().split("."))
    return lowest <= release < below


def found(*problems: str | None) -> list[str]:
    """The problems the checks found, the ``None`` of those that passed left out."""
    return [problem for problem in problems if problem is not None]


def public(part: Any) -> Part:
    """A part the SDK exports, named by where it is defined."""
    return qualified(part), part


def qualified(part: Any) -> str:
    """A class's or function's dotted name, as a message names it."""
    return f"{part.__module__}.{part.__qualname__}"


def takes(
    part: Part, positional: int, keywords: tuple[str, ...] = (), *, coroutine: bool = False
) -> str | None:
    """What is wrong with calling ``part`` as the fast path calls it, if anything."""
    where, function = part
    if function is MISSING:
        return f"{where} is missing"
    if not callable(function):
        return f"{where} is not callable"
    if coroutine and not inspect.iscoroutinefunction(function):
        return f"{where} is no longer a coroutine function"
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None  # no signature to read (a builtin): being callable is all that is known
    try:
        signature.bind(*range(positional), **dict.fromkeys(keywords))
    except TypeError:
        named = "".join(f", {keyword}=..." for keyword in keywords)
        return f"{where}{signature} cannot be called with {positional} positional{named}"
    return None


def headers(part: Part) -> str | None:
    """What is wrong with the event stream's headers, which go to ASGI as they are."""
    where, value = part
    if value is MISSING:
        return f"{where} is missing"
    if (
        not isinstance(value, list)
        or not all(_is_header(pair) for pair in value)
        or (b"content-type", b"text/event-stream") not in value
    ):
        return f"{where} is not a list of (bytes, bytes) headers naming text/event-stream"
    return None


def _is_header(pair: object) -> bool:
    return isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(b, bytes) for b in pair)


def seconds(part: Part) -> str | None:
    """What is wrong with the keepalive interval, which goes to the event loop's timer."""
    where, value = part
    if value is MISSING:
        return f"{where} is missing"
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return f"{where} is not a positive number of seconds"
    return None


def keeps(cls: Callable[..., object], attribute: str, *rest: object) -> str | None:
    """What is wrong with reading what ``cls`` wraps (its first argument) as ``attribute``."""
    where = qualified(cls)
    probe = object()
    try:
        built = cls(probe, *rest)
    except Exception as exc:
        return f"{where} cannot be built around an app ({type(exc).__name__})"
    if getattr(built, attribute, MISSING) is not probe:
        return f"{where} no longer keeps what it wraps as .{attribute}"
    return None
