"""Write ``docs/reference/cli.md`` from the command line's own parser: every command's
``--help`` as ``redis-tasks`` prints it, so the page cannot drift from the options.

``make docs`` runs it; ``--check`` exits 1 when the page is not what the parser gives now
(``tests/ops/test_docs.py`` runs that, so a new option without a page fails the tests).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parent / "reference" / "cli.md"
# The help's width, fixed: argparse wraps to the terminal's, and the page must not
# depend on where it was made. Environment defaults are cleared for the same reason.
_COLUMNS = "100"
_ENVIRONMENT = ("REDIS_URL", "REDIS_TASKS_LOOP", "REDIS_TASKS_PREFIX")


def page() -> str:
    """The page's text."""
    os.environ["COLUMNS"] = _COLUMNS
    for name in _ENVIRONMENT:
        os.environ.pop(name, None)
    from redis_tasks.__main__ import build_parser

    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    lines = [
        "# Command line",
        "",
        "Every command of `redis-tasks`, with its `--help` as the installed command prints",
        "it (this page is generated from the parser: `make docs`).",
        "",
        "```text",
        parser.format_help().rstrip(),
        "```",
    ]
    for name, command in commands.choices.items():
        lines += [
            "",
            f"## `redis-tasks {name}`",
            "",
            "```text",
            command.format_help().rstrip(),
            "```",
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    """Write the page, or with ``--check`` say whether it is current (exit 1 if not)."""
    text = page()
    if sys.argv[1:] == ["--check"]:
        if not PAGE.is_file() or PAGE.read_text() != text:
            print(f"{PAGE} is not current: run `make docs`", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
