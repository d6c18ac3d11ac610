"""``TaskOrigin``: the framework's opaque record of what a task was created for."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from ._errors import LimitExceededError, ValidationError
from ._json import canonical, check_json, parse_object, utf8_size

__all__ = ["DEFAULT_MAX_ORIGIN_BYTES", "DEFAULT_MAX_ORIGIN_DEPTH", "TaskOrigin"]

DEFAULT_MAX_ORIGIN_BYTES: Final = 64 * 1024
DEFAULT_MAX_ORIGIN_DEPTH: Final = 32


class TaskOrigin:
    """Opaque framework data that says what a task was created for.

    It is kept byte-for-byte: :meth:`to_persisted_string` returns exactly the
    string :meth:`from_persisted_string` was given, and the store keeps those
    bytes. Equality and hashing use a canonical form instead, so two origins
    that differ only in member order, insignificant whitespace or the scale of
    equal numbers (``1.0``, ``1.00``, ``10e-1``) are equal, while ``1`` and
    ``"1"`` are not.

    An origin may carry tool arguments: its ``repr`` and ``str`` never show its
    content, and the library never logs it.
    """

    __slots__ = ("_canonical", "_persisted", "_state")

    _persisted: str
    _canonical: str
    _state: dict[str, Any]

    def __init__(self) -> None:
        raise TypeError("use TaskOrigin.from_persisted_string() or from_persisted_state()")

    @classmethod
    def _make(cls, persisted: str, state: dict[str, Any], canonical_text: str) -> TaskOrigin:
        origin = object.__new__(cls)
        object.__setattr__(origin, "_persisted", persisted)
        object.__setattr__(origin, "_state", state)
        object.__setattr__(origin, "_canonical", canonical_text)
        return origin

    @classmethod
    def from_persisted_string(
        cls,
        persisted: str,
        *,
        max_bytes: int = DEFAULT_MAX_ORIGIN_BYTES,
        max_depth: int = DEFAULT_MAX_ORIGIN_DEPTH,
    ) -> TaskOrigin:
        """Build an origin from stored text, keeping the text exactly.

        Raises :class:`ValidationError` unless ``persisted`` is one JSON object
        (no duplicate members, no ``NaN``), and :class:`LimitExceededError` when
        it is larger than ``max_bytes`` UTF-8 bytes or deeper than ``max_depth``.
        """
        state = parse_object(persisted, max_bytes=max_bytes, max_depth=max_depth, what="origin")
        return cls._make(persisted, state, canonical(state))

    @classmethod
    def from_persisted_state(
        cls,
        state: Mapping[str, Any],
        *,
        max_bytes: int = DEFAULT_MAX_ORIGIN_BYTES,
        max_depth: int = DEFAULT_MAX_ORIGIN_DEPTH,
    ) -> TaskOrigin:
        """Build an origin from a JSON object; its persisted string is the canonical form."""
        if not isinstance(state, Mapping):
            raise ValidationError("origin must be a JSON object")
        # Check before copying: deepcopy recurses without bound, so a hostile
        # 100,000-deep state must be refused by the depth check first. The copy is
        # checked again, since the caller's objects may change under us.
        check_json(dict(state), max_depth=max_depth, what="origin", exact_numbers=True)
        owned = copy.deepcopy(dict(state))
        check_json(owned, max_depth=max_depth, what="origin", exact_numbers=True)
        text = canonical(owned)
        if utf8_size(text, "origin") > max_bytes:
            raise LimitExceededError(f"origin exceeds {max_bytes} bytes")
        return cls._make(text, owned, text)

    def to_persisted_string(self) -> str:
        """Return the exact text to store: the one this origin was built from."""
        return self._persisted

    @property
    def persisted_state(self) -> dict[str, Any]:
        """A fresh copy of the parsed state (integers as ``int``, fractions as ``Decimal``)."""
        return copy.deepcopy(self._state)

    @property
    def canonical_string(self) -> str:
        """The canonical JSON text that equality and hashing are defined on."""
        return self._canonical

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TaskOrigin):
            return NotImplemented
        return self._canonical == other._canonical

    def __hash__(self) -> int:
        return hash(self._canonical)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("TaskOrigin is immutable")

    def __copy__(self) -> TaskOrigin:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> TaskOrigin:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickling (multiprocessing) must keep the exact persisted text.
        return (_restore, (self._persisted,))

    def __repr__(self) -> str:
        return "TaskOrigin(<redacted>)"

    __str__ = __repr__


def _restore(persisted: str) -> TaskOrigin:
    # Bounds were checked when the origin was first built; unpickling must not
    # fail for an origin made with larger-than-default bounds.
    return TaskOrigin.from_persisted_string(
        persisted, max_bytes=len(persisted) * 4 + 1, max_depth=10_000
    )
