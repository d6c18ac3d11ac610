"""TaskOrigin: byte-exact persistence, canonical equality, bounds, redaction."""

from __future__ import annotations

import json
import pickle
import random
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from redis_tasks import LimitExceededError, TaskOrigin, ValidationError


def origin(text: str) -> TaskOrigin:
    return TaskOrigin.from_persisted_string(text)


@pytest.mark.parametrize(
    "text",
    [
        "{}",
        '{"a":1}',
        ' { "a" : 1 } ',
        '{"b":1,"a":2}',
        '{"a":"\\u00e9"}',
        '{"a":"é"}',
        '{"n":1.000000000000000000000000000000000001}',
        '{\n"x": [1,\t2]\n}\n',
    ],
)
def test_persisted_string_is_returned_exactly(text: str) -> None:
    assert origin(text).to_persisted_string() == text


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ('{"a":1,"b":2}', '{"b":2,"a":1}'),  # member order
        ('{"a":[1,2]}', ' {\n "a" : [ 1 ,\t2 ] } '),  # insignificant whitespace
        ('{"n":1.0}', '{"n":1.00}'),  # decimal scale
        ('{"n":1.0}', '{"n":10e-1}'),
        ('{"n":1}', '{"n":1.0}'),
        ('{"n":100}', '{"n":1e2}'),
        ('{"n":0}', '{"n":-0.0}'),
        ('{"n":12345678901234567890.5}', '{"n":1234567890123456789050e-2}'),
        ('{"s":"é"}', '{"s":"\\u00e9"}'),  # escapes are the same string
        ('{"s":"😀"}', '{"s":"\\ud83d\\ude00"}'),
        ('{"a":{"y":1,"x":2}}', '{"a":{"x":2,"y":1}}'),  # nested order
    ],
)
def test_equal_origins_have_equal_canonical_forms_and_hashes(left: str, right: str) -> None:
    assert origin(left) == origin(right)
    assert hash(origin(left)) == hash(origin(right))
    assert origin(left).to_persisted_string() != origin(right).to_persisted_string()


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ('{"n":1}', '{"n":"1"}'),
        ('{"n":1}', '{"n":true}'),
        ('{"n":0}', '{"n":false}'),
        ('{"n":null}', '{"n":0}'),
        ('{"a":[1,2]}', '{"a":[2,1]}'),
        ('{"n":1.0000000000000000000000000000001}', '{"n":1}'),  # beyond float precision
        ('{"s":"\\ud800"}', '{"s":"\\ud801"}'),
        ('{"a":{}}', '{"a":[]}'),
    ],
)
def test_different_origins_are_not_equal(left: str, right: str) -> None:
    assert origin(left) != origin(right)


def test_from_persisted_state_persists_the_canonical_form() -> None:
    state: dict[str, Any] = {"b": [1, 2.5, Decimal("3.10")], "a": {"z": None, "y": True}, "c": "é"}
    made = TaskOrigin.from_persisted_state(state)
    assert made.to_persisted_string() == '{"a":{"y":true,"z":null},"b":[1,2.5,3.1],"c":"é"}'
    assert made == origin(' {"c":"\\u00e9","b":[1.0,2.50,3.1],"a":{"y":true,"z":null}} ')
    state["b"].append(99)  # the origin keeps its own copy
    assert made.persisted_state["b"] == [1, 2.5, Decimal("3.10")]


def test_persisted_state_keeps_numbers_exact() -> None:
    state = origin('{"n":3.14159265358979323846264338327950288,"i":12345678901234567890123}')
    assert state.persisted_state == {
        "n": Decimal("3.14159265358979323846264338327950288"),
        "i": 12345678901234567890123,
    }


@pytest.mark.parametrize(
    "text",
    [
        "[1]",
        '"x"',
        "1",
        "null",
        "",
        "{",
        '{"a":}',
        '{"a":NaN}',
        '{"a":Infinity}',
        '{"a":-Infinity}',
        '{"a":1,"a":2}',
        "{'a':1}",
        '{"a":1} x',
    ],
)
def test_anything_but_one_json_object_is_refused(text: str) -> None:
    with pytest.raises(ValidationError):
        origin(text)


def test_origin_size_is_bounded_in_utf8_bytes() -> None:
    text = '{"a":"' + "é" * 100 + '"}'
    assert TaskOrigin.from_persisted_string(text, max_bytes=len(text.encode()))
    with pytest.raises(LimitExceededError):
        TaskOrigin.from_persisted_string(text, max_bytes=len(text.encode()) - 1)
    with pytest.raises(LimitExceededError):
        TaskOrigin.from_persisted_state({"a": "é" * 100}, max_bytes=100)


def test_origin_depth_is_bounded() -> None:
    nested = '{"a":' * 32 + "1" + "}" * 32
    assert origin(nested)
    with pytest.raises(LimitExceededError):
        origin('{"a":' * 33 + "1" + "}" * 33)
    # Far deeper than Python's recursion limit: refused, not a crash.
    with pytest.raises(LimitExceededError):
        TaskOrigin.from_persisted_string("[" * 50_000 + "]" * 50_000, max_bytes=200_000)


def test_from_persisted_state_refuses_non_json() -> None:
    bad: Any
    for bad in ({"a": object()}, {"a": float("nan")}, {1: "x"}, {"a": {1, 2}}, ["not a dict"]):
        with pytest.raises(ValidationError):
            TaskOrigin.from_persisted_state(bad)


def test_repr_and_str_never_show_the_content() -> None:
    secret = origin('{"password":"hunter2"}')
    assert "hunter2" not in repr(secret)
    assert "hunter2" not in str(secret)
    assert "hunter2" not in f"{secret!r} {secret}"


def test_origin_is_immutable_and_pickles_exactly() -> None:
    made = origin(' {"b":1, "a":2} ')
    with pytest.raises(AttributeError):
        setattr(made, "_persisted", "{}")  # noqa: B010
    with pytest.raises(TypeError):
        TaskOrigin()
    again = pickle.loads(pickle.dumps(made))
    assert again == made
    assert again.to_persisted_string() == made.to_persisted_string()


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


def _shuffled_json(value: Any, rng: random.Random) -> str:
    """Render ``value`` with shuffled members, random whitespace and number scales."""

    def space() -> str:
        return rng.choice(["", " ", "\n", "\t ", "  "])

    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        inner = ",".join(
            f"{space()}{json.dumps(k)}{space()}:{space()}{_shuffled_json(v, rng)}" for k, v in items
        )
        return "{" + inner + space() + "}"
    if isinstance(value, list):
        return "[" + ",".join(space() + _shuffled_json(v, rng) for v in value) + space() + "]"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        text = repr(value) if isinstance(value, float) else str(value)
        if "e" not in text and "inf" not in text:
            text = (text if "." in text else text + ".") + "0" * rng.randint(0, 3)
            text = text.rstrip(".")
        return text
    return json.dumps(value, ensure_ascii=rng.random() < 0.5)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6), st.randoms())
def test_any_rendering_of_the_same_state_is_equal_and_kept_exactly(
    state: dict[str, Any], rng: random.Random
) -> None:
    first = _shuffled_json(state, rng)
    second = _shuffled_json(state, rng)
    a, b = origin(first), origin(second)
    assert a == b
    assert hash(a) == hash(b)
    assert a.to_persisted_string() == first
    assert a == TaskOrigin.from_persisted_state(state)
    # The canonical form is itself a fixed point.
    canonical = TaskOrigin.from_persisted_state(state).to_persisted_string()
    assert origin(canonical).to_persisted_string() == canonical
    assert origin(canonical) == a


@settings(max_examples=200, deadline=None)
@given(json_values, json_values)
def test_origins_of_different_values_differ(x: Any, y: Any) -> None:
    if _json_equal(x, y):
        return
    assert TaskOrigin.from_persisted_state({"v": x}) != TaskOrigin.from_persisted_state({"v": y})


def _json_equal(x: Any, y: Any) -> bool:
    if isinstance(x, bool) or isinstance(y, bool) or x is None or y is None:
        return type(x) is type(y) and x == y
    if isinstance(x, int | float) and isinstance(y, int | float):
        return Decimal(repr(x) if isinstance(x, float) else x) == Decimal(
            repr(y) if isinstance(y, float) else y
        )
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_json_equal(x[k], y[k]) for k in x)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(map(_json_equal, x, y))
    return type(x) is type(y) and x == y
