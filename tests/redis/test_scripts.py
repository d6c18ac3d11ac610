"""The script catalogue: constants generated from Python, literal checks."""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from redis_tasks import InternalError
from redis_tasks._codes import ReturnCode
from redis_tasks._ids import MAX_PARTITIONS, new_task_id, parse_task_id
from redis_tasks._record import RECORD_FIELDS
from redis_tasks._redis import scripts as lua
from redis_tasks._redis.keys import KeySpace
from redis_tasks._redis.lua_source import check_uses, read_includes
from redis_tasks._redis.lua_text import inline
from redis_tasks._status import TaskStatus
from redis_tasks.testing import RedisServer

RANDOM = "q3Zk" * 6  # 24 characters of the URL-safe alphabet

VALID_IDS = [
    f"0.{RANDOM}",
    f"7.{RANDOM}",
    f"10.{RANDOM}",
    f"9999.{RANDOM}",
    f"{MAX_PARTITIONS - 1}.{RANDOM}",
    "1." + "A-_z09" * 4,
    "2." + "-" * 24,
    *(new_task_id(MAX_PARTITIONS) for _ in range(50)),
]
INVALID_IDS = [
    "",
    "0",
    "0.",
    f"{MAX_PARTITIONS}.{RANDOM}",
    f"99999.{RANDOM}",
    f"100000.{RANDOM}",
    f"00.{RANDOM}",
    f"01.{RANDOM}",
    f"007.{RANDOM}",
    f"-1.{RANDOM}",
    f"+1.{RANDOM}",
    f" 1.{RANDOM}",
    f"1e3.{RANDOM}",
    f"0x1.{RANDOM}",
    f"1 .{RANDOM}",
    f".{RANDOM}",
    f"1.{RANDOM[:-1]}",
    f"1.{RANDOM}A",
    f"1.{RANDOM}\n",
    f"1.{RANDOM}:req",
    f"1.{RANDOM[:-1]}=",
    f"1.{RANDOM[:-1]}+",
    f"1.{RANDOM[:-1]}/",
    f"1.{RANDOM[:-1]}.",
    f"1.{RANDOM[:-1]}%",
    f"1.{RANDOM[:-1]}\x00",
    f"1.{RANDOM[:-1]}é",
    f"1.{RANDOM[:-2]}é",
    f"\u0661.{RANDOM}",  # an Arabic-Indic digit one
    f"1,{RANDOM}",
    f"1x{RANDOM}",
    f"1.{RANDOM}.{RANDOM}",
    f"{{rt:1.2}}:task:1.{RANDOM}",
]


def test_the_id_sets_are_what_they_claim_to_be() -> None:
    assert all(parse_task_id(task_id) is not None for task_id in VALID_IDS)
    assert all(parse_task_id(task_id) is None for task_id in INVALID_IDS)


async def test_the_lua_task_id_check_accepts_exactly_what_parse_task_id_accepts(
    redis_server: RedisServer,
) -> None:
    source = lua.assemble(("keys",), "return is_task_id(ARGV[1]) and 1 or 0\n")
    client = Redis.from_url(redis_server.url)
    try:
        for task_id in [*VALID_IDS, *INVALID_IDS, *(secrets.token_urlsafe(20) for _ in range(20))]:
            accepted = await client.eval(source, 0, task_id.encode())
            assert accepted == (parse_task_id(task_id) is not None), task_id
    finally:
        await client.aclose()


async def test_the_lua_task_keys_are_keyspace_task_keys(redis_server: RedisServer) -> None:
    # task_keys leaves the input keys out; input_keys makes them from the record key.
    body = (
        "local k = task_keys(ARGV[1], ARGV[2], KEYS[1], KEYS[2], 's')\n"
        "local requests, issued, answers, journal = input_keys(k)\n"
        "return {k.task, requests, issued, answers, journal, k.work, k.events}\n"
    )
    source = lua.assemble(("keys",), body)
    space = KeySpace("rt")
    task_id = new_task_id(16)
    partition = parse_task_id(task_id)
    assert partition is not None
    keys = space.task(partition, task_id)
    client = Redis.from_url(redis_server.url)
    try:
        names = await client.eval(source, 2, keys.work, keys.events, space.tag(partition), task_id)
    finally:
        await client.aclose()
    assert [name.decode() for name in names] == [
        keys.task,
        keys.requests,
        keys.issued,
        keys.answers,
        keys.journal,
        keys.work,
        keys.events,
    ]


async def test_the_lua_partition_of_a_tag_is_keyspace_s(redis_server: RedisServer) -> None:
    """tag_partition reads a KeySpace tag by its first ':' and the '.' after it: right
    for any prefix KeySpace accepts (dots and dashes in it too) and any partition."""
    source = lua.assemble(("keys",), "return tag_partition(ARGV[1])\n")
    client = Redis.from_url(redis_server.url)
    try:
        for prefix in ("rt", "my.app-1", "a_b.c.d", "x" * 64):
            space = KeySpace(prefix)
            for partition in (0, 7, 1234, MAX_PARTITIONS - 1):
                found = await client.eval(source, 0, space.tag(partition))
                assert found == str(partition).encode(), (prefix, partition)
    finally:
        await client.aclose()


def test_statuses_and_fields_come_from_python() -> None:
    for status in TaskStatus:
        assert lua.CONSTANTS[f"ST_{status.name}"] == f"'{status.value}'"
    # claim_entry() writes the lease fields; the table has to know them.
    assert {"at", "ld", "lo", "fn", "wk"} <= RECORD_FIELDS.keys()
    for path in [*lua.lua_dir().glob("*.lua"), *lua.lua_dir().glob("includes/*.lua")]:
        lua.check_literals(path.name, path.read_text())


@pytest.mark.parametrize(
    ("line", "complaint"),
    [
        ("if t[1] == 'working' then return {RC_OK} end", "use ST_WORKING"),
        ('redis.call("HSET", KEYS[1], "st", "cancelled")', "use ST_CANCELLED"),
        ("redis.call('HGET', KEYS[1], 'zz')", "no record field"),
    ],
)
def test_a_status_literal_or_an_unknown_field_is_refused(line: str, complaint: str) -> None:
    source = "-- 'working' in a comment is fine, and so is 'zz'\n" + line + "\n"
    with pytest.raises(InternalError, match=complaint):
        lua.check_literals("broken", source)


def _copy_of_lua(tmp_path: Path) -> Path:
    shutil.copytree(lua.lua_dir(), tmp_path / "lua")
    return tmp_path / "lua"


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def _refused_at_load(tmp_path: Path, file: str, old: str, new: str, complaint: str) -> None:
    """A copy of lua/ with ``old`` made ``new`` in ``file`` fails to load, saying ``complaint``."""
    directory = _copy_of_lua(tmp_path)
    _edit(directory / file, old, new)
    with pytest.raises(InternalError, match=complaint):
        lua.load_all(directory)


def test_each_script_gets_the_includes_it_names_and_what_they_need() -> None:
    assert lua.scripts["find"].includes == ("common",)
    # claim.lua names common, keys, work and claim; claim needs tenants (which needs
    # common, keys and work) and terminal (which needs waiting): each include comes
    # after those it needs.
    assert lua.scripts["claim"].includes == (
        "common",
        "keys",
        "work",
        "tenants",
        "waiting",
        "terminal",
        "claim",
    )
    assert lua.scripts["claim_next"].includes == (
        "common",
        "keys",
        "work",
        "tenants",
        "waiting",
        "terminal",
        "claim",
    )
    assert "local function is_task_id" not in lua.scripts["find"].source
    assert "local function claim_entry" not in lua.scripts["finish"].source


async def test_a_script_keeps_only_the_definitions_it_uses_and_theirs(
    redis_server: RedisServer,
) -> None:
    # cancel_requested uses fence_matches and three return codes of all the rest.
    small = lua.scripts["cancel_requested"].source
    assert "local function fence_matches" in small
    assert "local function now_ms" not in small
    assert "local PICKUP_FIELDS" not in small
    assert "local RC_TERMINAL" not in small
    # worker_guard needs fence_matches and TERMINAL: each kept, each before its use.
    # The scalar constants (ST_*, KEY_TASK) are not defined but written where read,
    # in TERMINAL's definition too; a name right after `..` is a read as well.
    body = "return {worker_guard(ARGV[1], ARGV[2], ARGV[3]), 'x' ..KEY_TASK}\n"
    source = lua.assemble(("common",), body)
    order = [source.index(f"local {name}") for name in ("TERMINAL", "function fence_matches")]
    assert order == sorted(order) < [source.index("local function worker_guard")] * 2
    assert "local function now_ms" not in source
    assert "ST_COMPLETED" not in source
    assert "KEY_TASK" not in source
    assert f"[({lua.CONSTANTS['ST_COMPLETED']})] = true" in source
    client = Redis.from_url(redis_server.url)
    try:
        working = await client.eval(source, 0, TaskStatus.WORKING.value, "3", "3")
        done = await client.eval(source, 0, TaskStatus.COMPLETED.value, "3", "3")
        stale = await client.eval(source, 0, TaskStatus.WORKING.value, "4", "3")
    finally:
        await client.aclose()
    assert working == [ReturnCode.OK, b"x:task:"]
    assert done[0] == ReturnCode.TERMINAL
    assert stale[0] == ReturnCode.LEASE_LOST


def test_the_order_includes_are_named_in_does_not_matter(tmp_path: Path) -> None:
    directory = _copy_of_lua(tmp_path)
    _edit(
        directory / "claim_next.lua",
        "Includes: common, keys, work, tenants, claim",
        "Includes: claim, tenants, work, keys, common",
    )
    assert lua.load_all(directory)["claim_next"].includes == (
        "common",
        "keys",
        "work",
        "tenants",
        "waiting",
        "terminal",
        "claim",
    )


@pytest.mark.parametrize(
    ("file", "old", "new", "complaint"),
    [
        (
            "claim_next.lua",
            "Includes: common, keys, work, tenants, claim",
            "Includes: common, work, tenants, claim",
            "claim_next.lua uses is_task_id, record_key, task_keys of include keys, not included",
        ),
        (
            "take_answers.lua",
            "Includes: common",
            "Includes: common, keys",
            "take_answers.lua includes keys but uses nothing of it",
        ),
        (
            "take_answers.lua",
            "Includes: common",
            "Includes: common, nosuch",
            "includes nosuch, which lua/includes/ lacks",
        ),
        (
            "includes/claim.lua",
            "-- Includes: common, keys, tenants, terminal\n",
            "-- Includes: keys, tenants, terminal\n",
            "claim.lua uses .* of include common, not included",
        ),
        (
            "take_answers.lua",
            "local answers = ",
            "local function now_ms() return 0 end\nlocal answers = ",
            "take_answers.lua redefines now_ms of include common",
        ),
        (
            "includes/keys.lua",
            "local function task_keys(",
            "local function drop_entry() end\nlocal function task_keys(",
            "drop_entry is defined by both",
        ),
        (  # a statement would go with the definition above it, when that one is left out
            "includes/keys.lua",
            "local function task_keys(",
            "redis.setresp(3)\nlocal function task_keys(",
            "keys.lua holds only definitions at its top level, not 'redis.setresp",
        ),
    ],
)
def test_a_script_using_an_include_it_does_not_name_is_refused_at_load(
    tmp_path: Path, file: str, old: str, new: str, complaint: str
) -> None:
    _refused_at_load(tmp_path, file, old, new, complaint)


@pytest.mark.parametrize(
    ("file", "old", "new", "complaint"),
    [
        (  # the trim knew such a local by its first name: a script using B lost it
            "includes/keys.lua",
            "local function task_keys(",
            "local A_ONE, B_TWO = 1, 2\nlocal function task_keys(",
            "one name per top-level local, not 'local A_ONE,'",
        ),
        (  # a typo, or a helper no include defines: Redis would say so mid-call
            "take_answers.lua",
            "local answers = ",
            "local unused = no_such_helper(1)\nlocal answers = ",
            "lua/take_answers.lua reads no_such_helper, which it never defines",
        ),
        (  # finish_batch's group: the header's layout against the binding's FinishArgs
            "finish_batch.lua",
            "outcome_field,\n                     outcome)",
            "outcome_field)",
            "header's outcomes disagree with finish_batch",
        ),
        (  # ...and against the script's own unpacking of each group
            "finish_batch.lua",
            "local task_id, fence, status,",
            "local fence, task_id, status,",
            "unpack each outcomes group into locals task_id, fence, status",
        ),
    ],
)
def test_an_assembled_script_reads_only_what_it_defines(
    tmp_path: Path, file: str, old: str, new: str, complaint: str
) -> None:
    _refused_at_load(tmp_path, file, old, new, complaint)


async def test_assembly_sees_names_and_definitions_as_lua_does(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """One pattern says which names code uses: the include check sees ``..is_task_id``
    as the trim does (it was blind to it). A ``local`` at column 0 inside a ``--[[ ]]``
    comment does not split the include there: the comment stays whole, with the
    definition below it, and the script runs."""
    with pytest.raises(InternalError, match="uses is_task_id of include keys, not included"):
        check_uses(
            "body",
            "return now_ms() ..is_task_id(ARGV[1])",
            ("common",),
            read_includes(lua.lua_dir()),
        )
    directory = _copy_of_lua(tmp_path)
    comment = "--[[ an old version, kept for reference:\nlocal function task_keys()\n]]\n"
    _edit(
        directory / "includes/keys.lua",
        "local function is_task_id(",
        comment + "local function is_task_id(",
    )
    body = "return {is_task_id(ARGV[1]) and 1 or 0, 'x' ..KEY_TASK}\n"
    source = lua.assemble(("common", "keys"), body, directory=directory)
    assert comment in source
    client = Redis.from_url(redis_server.url)
    try:
        assert await client.eval(source, 0, f"1.{RANDOM}") == [1, b"x:task:"]
    finally:
        await client.aclose()


async def test_constants_are_written_where_code_reads_them_and_nowhere_else(
    redis_server: RedisServer,
) -> None:
    """A constant read by code becomes its value in parentheses, so it parses as it
    would have (``-N``, ``#K``, ``K:upper()``); a string, a comment, a field
    (``t.N``) and a write (``{N = 1}``) keep the name."""
    source = "local t = {N = 1} -- N in a comment\nreturn {1-N, #K, K:upper(), 'N', t.N, 'x'..K}\n"
    inlined = inline(source, {"N": "-2", "K": "'ab'"})
    assert inlined == (
        "local t = {N = 1} -- N in a comment\n"
        "return {1-(-2), #('ab'), ('ab'):upper(), 'N', t.N, 'x'..('ab')}\n"
    )
    client = Redis.from_url(redis_server.url)
    try:
        assert await client.eval(inlined, 0) == [3, 2, b"AB", b"N", 1, b"xab"]
    finally:
        await client.aclose()


def test_includes_that_need_each_other_are_refused() -> None:
    def include(name: str, needs: tuple[str, ...]) -> lua.Include:
        return lua.Include(name, "", needs, frozenset())

    includes = {"a": include("a", ("b",)), "b": include("b", ("c",)), "c": include("c", ("a",))}
    with pytest.raises(InternalError, match="a -> b -> c -> a"):
        lua.assemble(["a"], "", includes=includes)


FIND_ARGS: dict[str, Any] = {
    "task": "t",
    "requests": "r",
    "grant": "g",
    "binding": "b",
    "confirm": 0,
}


def test_a_binding_puts_named_arguments_in_header_order() -> None:
    assert lua.find(**FIND_ARGS) == (lua.scripts["find"], ("t", "r", "g"), ("b", 0))
    call = lua.update(
        task="t",
        requests="r",
        answers="a",
        journal="j",
        events="e",
        signals="s",
        grant="g",
        work="w",
        stats="st",
        task_id="1.x",
        binding="b",
        event_opts="100",
        fair=1,
        responses=[b"k1", b"kinds1", b"body1", b"k2", b"kinds2", b"body2"],
    )
    assert call[1] == ("t", "r", "a", "j", "e", "s", "g", "w", "st")
    assert call[2] == (
        "1.x",
        "b",
        "100",
        1,
        b"k1",
        b"kinds1",
        b"body1",
        b"k2",
        b"kinds2",
        b"body2",
    )


@pytest.mark.parametrize(
    "arguments",
    [
        {k: v for k, v in FIND_ARGS.items() if k != "binding"},  # missing
        {**FIND_ARGS, "extra": "x"},  # extra
        {**{k: v for k, v in FIND_ARGS.items() if k != "grant"}, "grnt": "g"},  # misnamed
    ],
    ids=["missing", "extra", "misnamed"],
)
def test_a_call_with_a_missing_extra_or_misnamed_argument_raises(arguments: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        lua.find(**arguments)


def test_a_binding_takes_keywords_only() -> None:
    with pytest.raises(TypeError):
        lua.find("t", "r", "g", "b", 0)  # type: ignore[call-arg]


def test_a_binding_that_misplaces_an_argument_is_refused() -> None:
    def find(*, task: str, requests: str, grant: str, binding: str, confirm: int) -> lua.Call:
        return lua.scripts["find"], (task, grant, requests), (binding, confirm)

    with pytest.raises(InternalError, match="misplaces its arguments"):
        lua.check_binding(find, lua.scripts["find"])

    def take_answers(*, task: str, answers: str, fence: bytes) -> lua.Call:
        return lua.scripts["find"], (task, answers), (fence,)

    with pytest.raises(InternalError, match="misplaces its arguments"):
        lua.check_binding(take_answers, lua.scripts["take_answers"])


@pytest.mark.parametrize(
    ("file", "old", "new"),
    [
        ("take_answers.lua", "1 fence", "1 fencing"),
        ("take_answers.lua", "1 fence", "1 fence\n    2 extra"),
        ("update.lua", "5.. responses", "5 responses"),
        ("find.lua", "    3 grant", "    3 grant\n    4 more"),
    ],
)
def test_a_header_that_disagrees_with_its_binding_is_refused(
    tmp_path: Path, file: str, old: str, new: str
) -> None:
    _refused_at_load(tmp_path, file, old, new, "disagrees with its binding")


@pytest.mark.parametrize(
    ("file", "old", "new", "complaint"),
    [
        # Two ARGV locals swapped: each still reads a slot, the wrong one.
        (
            "finish.lua",
            "local fence = ARGV[2]\nlocal status = ARGV[3]",
            "local fence = ARGV[3]\nlocal status = ARGV[2]",
            "local fence reads ARGV\\[3\\], which the header names status",
        ),
        # Two KEYS locals swapped.
        (
            "create.lua",
            "local work_key = KEYS[1]\nlocal events_key = KEYS[2]",
            "local work_key = KEYS[2]\nlocal events_key = KEYS[1]",
            "local work_key reads KEYS\\[2\\], which the header names events",
        ),
        # A converted ARGV (tonumber) and a flag (== '1') are bindings too.
        (
            "claim_next.lua",
            "local count = tonumber(ARGV[3])",
            "local count = tonumber(ARGV[4])",
            "local count reads ARGV\\[4\\], which the header names lease_ms",
        ),
        (
            "claim_next.lua",
            "local wake = ARGV[8] == '1'",
            "local wake = ARGV[7] == '1'",
            "local wake reads ARGV\\[7\\], which the header names event_opts",
        ),
        # A slot the header does not have.
        (
            "take_answers.lua",
            "local fence = ARGV[1]",
            "local fence = ARGV[2]",
            "local fence reads ARGV\\[2\\], which the header lacks",
        ),
    ],
)
def test_a_local_bound_to_the_wrong_slot_is_refused_at_load(
    tmp_path: Path, file: str, old: str, new: str, complaint: str
) -> None:
    _refused_at_load(tmp_path, file, old, new, complaint)


def test_a_script_reading_the_leading_task_keys_must_declare_them_first(tmp_path: Path) -> None:
    # leading_task_keys() reads KEYS 1 to 8 by number: a header that moves one of them
    # (here work and events swapped) is refused before anything else about it.
    _refused_at_load(
        tmp_path,
        "request_cancel.lua",
        "    6 work           the partition's work stream\n    7 events",
        "    6 events         the partition's event stream\n    7 work",
        "calls leading_task_keys\\(\\) but its KEYS do not open with task, requests",
    )
