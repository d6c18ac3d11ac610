"""The documentation site builds with ``--strict`` (no broken link, no missing reference,
every snippet's file found) and its generated pages are current."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_strict(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    for name in ("RedisTaskManager", "TaskExecution", "TasksExtension", "SnapshotKey"):
        assert name in api, name  # the generated reference holds the public names


def test_the_command_line_page_is_the_parser_s() -> None:
    checked = subprocess.run(
        [sys.executable, "docs/cli_reference.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr


def test_the_map_of_the_code_names_every_module() -> None:
    """Every module and subpackage of ``redis_tasks/`` has its line on the Development page,
    so the map cannot fall behind the tree."""
    page = (ROOT / "docs/development/code-map.md").read_text()
    missing = [
        p.name + ("/" if p.is_dir() else "")
        for p in sorted((ROOT / "redis_tasks").iterdir())
        if not p.name.startswith("__")
        and (p.is_dir() or p.suffix == ".py")
        and p.name + ("/" if p.is_dir() else "") not in page
    ]
    assert missing == []
