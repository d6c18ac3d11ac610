"""Lua source as text: its code without comments and strings, and which of its
top-level definitions a script's body uses.

The loader (:mod:`.lua_source`) checks scripts with :func:`code` and trims the
constants and includes it joins to a script to what :func:`keep_used` finds the
body needs; :func:`check_globals` then proves the trim kept everything the script
reads. Nothing here knows a script's contract.

Safe by construction, not by care: :func:`code` keeps every offset (a ``local``
written at column 0 inside a ``--[[ ]]`` comment is blanked like the rest of the
comment, so it cannot start a piece), one pattern (:data:`USED_NAME`) says which
names code uses, for the trim and for the loader's checks alike, and a top-level
``local`` defines one name (``local A, B = 1, 2`` is refused: the trim would know
it as ``A`` alone).
"""

from __future__ import annotations

import functools
import itertools
import re
from typing import Final

from redis_tasks._errors import InternalError

__all__ = [
    "LUA_TOKENS",
    "REDIS_GLOBALS",
    "TOP_LEVEL_LOCAL",
    "USED_NAME",
    "check_globals",
    "code",
    "definitions",
    "inline",
    "keep_used",
    "redis_commands",
]

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
#: A name code uses: not a field (``t.name``, ``t:name``), but after ``..``, yes
#: (``'x' ..is_task_id(y)`` uses ``is_task_id``). The one pattern for it.
USED_NAME = re.compile(r"(?:(?<=\.\.)|(?<![.:\w]))([A-Za-z_]\w*)")
# A top-level `local` of more than one name: refused (see the module).
_MULTI_LOCAL = re.compile(r"^local\s+[A-Za-z_]\w*\s*,", re.M)

#: What a script may read without defining it: Lua's words, Redis's own globals and
#: the Lua library Redis keeps (a script cannot define a global: Redis refuses it).
REDIS_GLOBALS: Final = frozenset(
    re.findall(
        r"\w+",
        """
        and break do else elseif end false for function goto if in local nil not or
        repeat return then true until while
        redis KEYS ARGV cjson cmsgpack bit struct
        string table math os tonumber tostring type pairs ipairs next select unpack
        error assert pcall xpcall setmetatable getmetatable rawget rawset rawequal
        loadstring
        """,
    )
)
# Names a piece of code declares, at any depth: `local a, b`, `local function f`,
# `function (x, y)`, `for k, v in`, `for i =`.
_DECLARED = (
    re.compile(r"\blocal\s+function\s+([A-Za-z_]\w*)"),
    re.compile(r"\blocal\s+((?!function\b)[A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)"),
    re.compile(r"\bfunction\b[\w.:\s]*\(([^)]*)\)"),
    re.compile(r"\bfor\s+([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s+in\b"),
    re.compile(r"\bfor\s+([A-Za-z_]\w*)\s*="),
)
# A name written to, or a table constructor's key (`{st = x}`): not a read.
_WRITTEN = re.compile(r"\s*=(?!=)")


def code(source: str) -> str:
    """``source`` with its comments and the contents of its string literals blanked:
    the same length and the same lines, so an offset in it is one in ``source``."""
    return LUA_TOKENS.sub(_blank, source)


# What a script calls Redis with: `redis.call('XINFO', 'GROUPS', ...)` names the
# command and, for a container command, its subcommand. Only literal names: a
# command held in a variable would hide from the ACL that the check derives here.
_REDIS_CALL = re.compile(r"\bredis\.p?call\s*\(\s*(?:'([A-Za-z]+)'(?:\s*,\s*'([A-Za-z]+)')?)?")
# The commands whose ACL names carry their subcommand (`xinfo|groups`).
_CONTAINERS: Final = frozenset({"xinfo", "xgroup", "client", "config", "script", "cluster"})


def redis_commands(where: str, source: str) -> frozenset[str]:
    """The Redis commands ``source`` calls, by their ACL names (``xinfo|groups``),
    read from its ``redis.call``/``redis.pcall`` calls outside comments; refused
    (naming ``where``) where a command is not written as a literal."""
    without_comments = LUA_TOKENS.sub(
        lambda token: token.group(0) if token.group(0)[0] in "'\"" else _blank(token), source
    )
    found: set[str] = set()
    for call in _REDIS_CALL.finditer(without_comments):
        command, sub = call.group(1), call.group(2)
        if command is None:
            raise InternalError(f"{where} calls Redis with a command that is not a literal")
        name = command.lower()
        if name in _CONTAINERS and sub is not None:
            name = f"{name}|{sub.lower()}"
        found.add(name)
    return frozenset(found)


def _blank(token: re.Match[str]) -> str:
    text = token.group(0)
    if text[0] in "'\"":  # a string keeps its quotes: it is still a value
        return text[0] + " " * (len(text) - 2) + text[-1]
    return re.sub(r"[^\n]", " ", text)


# Every script is joined from the same constants and a few includes: each text is
# cut, and each piece read for the names it uses, once per process, not per script.
@functools.cache
def definitions(text: str) -> tuple[tuple[str | None, str], ...]:
    """``text`` cut before each top-level definition: ``(name, text)`` each, in order,
    after what comes before the first (an include's opening comment), which has none."""
    text_code = code(text)
    multiple = _MULTI_LOCAL.search(text_code)
    if multiple is not None:
        raise InternalError(f"one name per top-level local, not {multiple.group(0)!r}...")
    # Found in the code, where a comment cannot hide a `local` at column 0.
    starts = [match.start() for match in _DEFINITION.finditer(text_code)]
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
    return frozenset(USED_NAME.findall(code(text)))


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


def inline(source: str, values: dict[str, str]) -> str:
    """``source`` with each name of ``values`` that its code reads replaced by that
    value in parentheses (a literal: ``(0)``, ``('working')``), so it parses the same
    wherever the name stood (``#KEY``, ``-N``, ``K:sub()``).

    Why: a top-level ``local`` that a helper reads is one of the helper's upvalues,
    and Redis builds every helper's closure again at each call, looking each upvalue
    up in a list as long as the script's open locals: callgrind counted 13 % of a
    create's instructions in closure building and freeing with ~80 constants as
    locals. A literal is in the function's constant table, built once at load.
    Strings and comments are left alone (:func:`code` finds the names), and so are
    fields (``t.RC_OK``) and definitions (``local RC_OK =``), which the caller leaves
    out of ``source``.
    """
    text = code(source)
    out: list[str] = []
    at = 0
    for match in USED_NAME.finditer(text):
        name = match.group(1)
        if name in values and not _WRITTEN.match(text, match.end()):
            out.append(source[at : match.start(1)])
            out.append(f"({values[name]})")
            at = match.end(1)
    out.append(source[at:])
    return "".join(out)


def check_globals(where: str, source: str) -> None:
    """Refuse an assembled script ``source`` that reads a name it never declares and
    Redis does not give it (:data:`REDIS_GLOBALS`): a definition the trim left out,
    or a typo, which Redis would only report when a call reaches that line.

    Names are matched, not scopes: a name declared anywhere in the script counts as
    declared everywhere. That is enough for what this guards (a definition missing
    from the whole text), and keeps the check a few regular expressions.
    """
    text = code(source)
    declared = set(REDIS_GLOBALS)
    for pattern in _DECLARED:
        for match in pattern.finditer(text):
            declared.update(name.strip() for name in match.group(1).split(",") if name.strip())
    missing = sorted(
        {
            match.group(1)
            for match in USED_NAME.finditer(text)
            if match.group(1) not in declared and not _WRITTEN.match(text, match.end())
        }
    )
    if missing:
        raise InternalError(f"{where} reads {', '.join(missing)}, which it never defines")
