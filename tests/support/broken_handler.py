"""A handler module whose own code fails when imported (tests/ops/test_cli.py)."""

from __future__ import annotations

FAILS_ON_IMPORT = 1 / 0
