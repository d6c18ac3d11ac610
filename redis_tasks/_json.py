"""Bounded JSON handling: strict parsing, validation, canonical form and msgpack.

Three jobs, all of them guarding the store against what callers hand us:

* ``parse_object`` reads JSON text into Python values exactly (integers as
  ``int``, fractions as ``Decimal``), refusing duplicate members, ``NaN`` and
  anything deeper or larger than its bounds.
* ``canonical`` renders a JSON value in one canonical text, used for equality
  and hashing of origins and for fingerprints of input requests: members sorted,
  no insignificant whitespace, numbers in one form whatever their scale
  (``1 == 1.0 == 1.00 == 10e-1``).
* ``pack``/``unpack`` store plain JSON values (results, errors, answers) as
  msgpack after checking their types, depth and size.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import msgpack

from ._errors import LimitExceededError, ValidationError

__all__ = ["canonical", "check_json", "pack", "parse_object", "unpack", "utf8_size"]

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# Plain (non-exponent) notation is used while it stays short; past this many
# digits of shift, scientific notation keeps 1e999999 from becoming a megabyte.
_PLAIN_EXPONENT_LIMIT = 30


def utf8_size(text: str, what: str) -> int:
    """Return the UTF-8 size of ``text``; a string that has no UTF-8 form is invalid."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValidationError(f"{what} is not valid Unicode text") from None


def _reject_constant(name: str) -> Any:
    raise ValidationError(f"JSON constant {name} is not allowed")


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        # Parsers disagree on which duplicate wins; canonical equality would lie.
        raise ValidationError("JSON object has duplicate member names")
    return obj


def parse_object(text: str, *, max_bytes: int, max_depth: int, what: str) -> dict[str, Any]:
    """Parse ``text`` as one bounded JSON object, keeping every number exact."""
    if not isinstance(text, str):
        raise ValidationError(f"{what} must be a str")
    if utf8_size(text, what) > max_bytes:
        raise LimitExceededError(f"{what} exceeds {max_bytes} bytes")
    try:
        value = json.loads(
            text,
            parse_float=Decimal,
            parse_constant=_reject_constant,
            object_pairs_hook=_unique_members,
        )
    except RecursionError:
        raise LimitExceededError(f"{what} is nested deeper than {max_depth}") from None
    except json.JSONDecodeError:
        raise ValidationError(f"{what} is not valid JSON") from None
    if not isinstance(value, dict):
        raise ValidationError(f"{what} must be a JSON object")
    check_json(value, max_depth=max_depth, what=what, exact_numbers=True)
    return value


def check_json(value: Any, *, max_depth: int, what: str, exact_numbers: bool = False) -> None:
    """Check that ``value`` is a JSON value no deeper than ``max_depth``.

    Allowed: ``dict`` with ``str`` keys, ``list``, ``str``, ``int``, finite
    ``float``, ``bool`` and ``None``; ``Decimal`` too when ``exact_numbers``.
    """
    _check(value, 1, max_depth, what, exact_numbers)


def _check(value: Any, depth: int, max_depth: int, what: str, exact: bool) -> None:
    if value is None or isinstance(value, bool | int | str):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(f"{what} contains a non-finite number")
        return
    if isinstance(value, Decimal):
        if not exact or not value.is_finite():
            raise ValidationError(f"{what} contains a value that is not JSON")
        return
    if depth > max_depth:
        raise LimitExceededError(f"{what} is nested deeper than {max_depth}")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValidationError(f"{what} has a member name that is not a string")
            _check(item, depth + 1, max_depth, what, exact)
        return
    if isinstance(value, list):
        for item in value:
            _check(item, depth + 1, max_depth, what, exact)
        return
    raise ValidationError(f"{what} contains a value that is not JSON")


def _canonical_number(value: int | float | Decimal) -> str:
    decimal = value if isinstance(value, Decimal) else Decimal(repr(value))
    sign, digit_tuple, exponent = decimal.as_tuple()
    assert isinstance(exponent, int)  # finite: checked on the way in
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    if not digits:
        return "0"  # 0, 0.000 and -0 are all zero
    # Strip trailing zeros into the exponent without any rounding context, so
    # numbers longer than Decimal's default precision stay exact.
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    digits = stripped
    text = "-" if sign else ""
    if 0 <= exponent <= _PLAIN_EXPONENT_LIMIT:
        return text + digits + "0" * exponent
    if -_PLAIN_EXPONENT_LIMIT <= exponent < 0:
        point = len(digits) + exponent
        if point > 0:
            return text + digits[:point] + "." + digits[point:]
        return text + "0." + "0" * -point + digits
    adjusted = exponent + len(digits) - 1
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{text}{mantissa}e{adjusted:+d}"


def _canonical_string(text: str) -> str:
    encoded = json.dumps(text, ensure_ascii=False)
    # A lone surrogate has no UTF-8 form; escaping it keeps the canonical text
    # storable while still telling "\ud800" apart from every other string.
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", encoded)


def canonical(value: Any) -> str:
    """Render an already-checked JSON value in canonical form."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _canonical_string(value)
    if isinstance(value, int | float | Decimal):
        return _canonical_number(value)
    if isinstance(value, Mapping):
        members = sorted(value.items())
        return "{" + ",".join(f"{_canonical_string(k)}:{canonical(v)}" for k, v in members) + "}"
    return "[" + ",".join(canonical(item) for item in value) + "]"


def pack(value: Any, *, max_bytes: int, max_depth: int, what: str) -> bytes:
    """Check ``value`` as plain JSON and encode it as msgpack within ``max_bytes``."""
    check_json(value, max_depth=max_depth, what=what)
    try:
        data: bytes = msgpack.packb(value, use_bin_type=True)
    except OverflowError:
        raise ValidationError(f"{what} contains an integer outside 64 bits") from None
    except UnicodeEncodeError:
        raise ValidationError(f"{what} contains a string that is not valid Unicode") from None
    if len(data) > max_bytes:
        raise LimitExceededError(f"{what} exceeds {max_bytes} bytes")
    return data


def unpack(data: bytes) -> Any:
    """Decode msgpack written by :func:`pack`."""
    return msgpack.unpackb(data, raw=False)
