"""The README stays true: its first two commands, its code (each block an excerpt of a file
the tests run), and every ``redis-tasks bench`` line of the docs."""

from __future__ import annotations

import re
from pathlib import Path

from redis_tasks._bench._cli import SCENARIOS

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_the_first_two_commands_are_the_demo_and_the_tests() -> None:
    block = re.search(r"```sh\n(.*?)```", README, re.S)
    assert block is not None
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands[:2] == ["make demo", "make test"]


def test_the_readme_s_code_is_cut_from_files_the_tests_run() -> None:
    """The landing page shows excerpts; each must be, line for line, part of a file under
    ``examples/`` or ``docs_src/`` (which the tests run or build), so none can rot."""
    root = Path(__file__).resolve().parents[2]
    sources = [p.read_text() for d in ("examples", "docs_src") for p in (root / d).glob("*.py")]
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert len(blocks) == 2
    for block in blocks:
        assert any(block in source for source in sources), block


def test_every_documented_bench_command_parses() -> None:
    """``redis-tasks bench`` lines in both READMEs and the site's pages use only real
    scenarios and options."""
    from redis_tasks.__main__ import build_parser

    root = Path(__file__).resolve().parents[2]
    pages = [(root / "benchmarks" / "README.md").read_text()]
    pages += [page.read_text() for page in sorted((root / "docs").rglob("*.md"))]
    lines = [
        line.split("#")[0].split("&&")[-1].strip()
        for text in (README, *pages)
        for block in re.findall(r"```sh\n(.*?)```", text, re.S)
        for line in block.replace("\\\n", " ").splitlines()
        if "redis-tasks bench" in line
    ]
    assert len(lines) >= 4
    parser = build_parser()
    for line in lines:
        argv = line.split("redis-tasks", 1)[1].split()
        args = parser.parse_args(argv)
        assert args.command == "bench"
        assert set(args.scenarios) <= set(SCENARIOS), line
