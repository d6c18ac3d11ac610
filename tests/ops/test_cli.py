"""The command line's first impression: ``--version``, plain ``--help``, and a mistake
answered in one line with exit status 2, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from redis_tasks.__main__ import main
from redis_tasks._version import DISTRIBUTION, __version__

URL = "redis://127.0.0.1:1"  # never reached: every case fails before connecting


def test_version_names_the_distribution(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"redis-tasks {__version__} ({DISTRIBUTION})"


def test_the_changelog_s_newest_section_is_this_version() -> None:
    """Releases tell themselves apart: the version ``--version`` prints heads the
    changelog, unreleased while it is a development version, and every older section
    names its release."""
    changelog = Path(__file__).resolve().parents[2] / "CHANGELOG.md"
    headings = [line for line in changelog.read_text().splitlines() if line.startswith("## ")]
    release, _, development = __version__.partition(".dev")
    assert headings[0].startswith(f"## {release} ("), headings[0]
    assert ("(unreleased)" in headings[0]) == bool(development)
    assert all("unreleased" not in heading for heading in headings[1:])
    assert len({heading.split()[1] for heading in headings}) == len(headings)


@pytest.mark.parametrize("command", [[], ["worker"], ["inspect"], ["dashboard"], ["bench"]])
def test_help_is_plain_words(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    shown = capsys.readouterr().out
    assert "usage: redis-tasks" in shown
    for markup in ("``", ":class:", ":func:", ":meth:", "**"):
        assert markup not in shown


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["worker", "nosuchmodule_xyz:handler"], "cannot import module 'nosuchmodule_xyz'"),
        (["worker", "tests.support.broken_handler:handler"], "ZeroDivisionError"),
        (["worker", "os:nosuch"], "module 'os' has no 'nosuch'"),
        (["worker", "os:sep"], "os:sep is not an async function"),
        (["worker", "json:loads"], "json:loads is not an async function"),
        (["worker", "nocolon"], "must be MODULE:FUNCTION"),
        (["worker", "nosuch/tasks.py:handler"], "no such file: nosuch/tasks.py"),
        (["worker", "/etc/hostname.py:handler"], "no such file"),
        (["worker", "tests.support.handlers:handler", "--redis-url", "notaurl"], "not a Redis URL"),
        (["inspect", "--redis-url", "notaurl"], "not a Redis URL"),
        (["dashboard", "--redis-url", "notaurl"], "not a Redis URL"),
        (["bench", "--redis-url", "notaurl", "drain"], "not a Redis URL"),
        (["inspect", "--redis-url", URL, "--sample", "-1"], "--sample must be"),
        (["bench", "--redis-url", URL, "nosuchscenario"], "unknown scenario"),
    ],
)
def test_a_mistake_is_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if argv[0] == "worker" and "--redis-url" not in argv:
        argv = [*argv, "--redis-url", URL]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err
    assert err.count("\n") == 1, err
    assert err.startswith(f"redis-tasks {argv[0]}: ")
    assert "Traceback" not in err


def test_a_worker_that_cannot_reach_redis_says_where_and_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The address (without its password) and the cause, as ``check`` says them, in the
    retry lines and the last one (issue 52: "Redis unavailable" said neither)."""
    url = "redis://user:pw-s3cret@127.0.0.1:1/0"
    argv = ["worker", "tests.support.handlers:handler", "--redis-url", url]
    assert main([*argv, "--startup-timeout", "0.5", "--log-level", "warning"]) == 1
    err = capsys.readouterr().err
    said = [json.loads(line)["msg"] for line in err.splitlines() if line.startswith("{")]
    assert said[-1].startswith("could not start: Redis unavailable at redis://127.0.0.1:1/0: ")
    assert "Connection refused" in said[-1], said[-1]
    assert any(line.endswith("; retrying at startup") for line in said), said
    assert "s3cret" not in err


def test_a_handler_may_be_named_by_its_file(tmp_path: Path) -> None:
    """As ``--fastmcp`` takes ``app.py:mcp``: a file under the current directory is the
    module its path names; one elsewhere is refused in one line (issue 52)."""
    from redis_tasks._cli_handler import load_handler
    from tests.support import handlers

    assert load_handler("tests/support/handlers.py:handler") is handlers.handler
    outside = tmp_path / "tasks.py"
    outside.write_text("async def handler(execution):\n    return {}\n")
    with pytest.raises(ValueError, match="not under the current directory"):
        load_handler(f"{outside}:handler")
