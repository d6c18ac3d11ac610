"""Lua source as text: its code without comments and strings, and which of its
top-level definitions a script's body uses.

The loader (:mod:`.lua_source`) checks scripts with :func:`code` and trims the
constants and includes it joins to a script to what :func:`keep_used` finds the
body needs. Nothing here knows a script's contract.
"""

from __future__ import annotations

import functools
import itertools
import re

from redis_tasks._errors import InternalError

__all__ = ["LUA_TOKENS", "TOP_LEVEL_LOCAL", "code", "definitions", "keep_used"]

# Comments and string literals of Lua source, in one pass so that neither hides
# in the other; only single-line strings are used in our scripts.
LUA_TOKENS = re.compile(
    r"--\[\[.*?\]\]|--[^\n]*|'((?:\\.|[^'\\\n])*)'|\"((?:\\.|[^\"\\\n])*)\"", re.S
)
#: A top-level ``local`` (a function or a value), and the name it defines.
TOP_LEVEL_LOCAL = re.compile(r"^local\s+(?:function\s+)?([A-Za-z_]\w*)", re.M)
# A top-level definition of the constants or an include, with the comment lines right
# above it: from there up to the next one. Includes hold nothing else at the top level.
_DEFINITION = re.compile(r"^(?:--[^\n]*\n|[ \t]*\n)*local\s", re.M)
# A name a piece of code uses: not a field (`t.name`, `t:name`), but after `..`, yes.
_USED = re.compile(r"(?:(?<=\.\.)|(?<![.:\w]))([A-Za-z_]\w*)")


def code(source: str) -> str:
    """``source`` without comments and with every string literal emptied."""
    return LUA_TOKENS.sub(lambda m: "''" if m.group(0)[0] in "'\"" else " ", source)


# Every script is joined from the same constants and a few includes: each text is
# cut, and each piece read for the names it uses, once per process, not per script.
@functools.cache
def definitions(text: str) -> tuple[tuple[str | None, str], ...]:
    """``text`` cut before each top-level definition: ``(name, text)`` each, in order,
    after what comes before the first (an include's opening comment), which has none."""
    starts = [match.start() for match in _DEFINITION.finditer(text)]
    pieces: list[tuple[str | None, str]] = [(None, text[: starts[0] if starts else len(text)])]
    for start, end in itertools.pairwise([*starts, len(text)]):
        piece = text[start:end]
        defined = TOP_LEVEL_LOCAL.search(code(piece))
        if defined is None:  # _DEFINITION found a `local` there
            raise InternalError(f"no definition in {piece[:60]!r}")
        pieces.append((defined.group(1), piece))
    return tuple(pieces)


@functools.cache
def _uses(text: str) -> frozenset[str]:
    """The names ``text``'s code uses."""
    return frozenset(_USED.findall(code(text)))


def keep_used(pieces: list[tuple[str | None, str]], body: str) -> str:
    """The ``pieces`` (:func:`definitions`) that ``body`` uses, and those they use in
    turn, joined in their order; unnamed pieces (comments) are kept."""
    defined: dict[str, list[str]] = {}
    for defines, text in pieces:
        if defines is not None:
            defined.setdefault(defines, []).append(text)
    needed: set[str] = set()
    todo = set(_uses(body))
    while todo:
        name = todo.pop()
        if name in needed or name not in defined:
            continue
        needed.add(name)
        for text in defined[name]:
            todo |= _uses(text)
    return "".join(text for name, text in pieces if name is None or name in needed)
