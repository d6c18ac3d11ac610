"""The version and the distribution name: the one place either is written.

``pyproject.toml`` reads the version from here (hatch's ``[tool.hatch.version]``),
``redis-tasks --version`` prints both, and install hints name the distribution.
The import name stays ``redis_tasks``; the distribution is ``redis-mcp-tasks``
because ``redis-tasks`` on the package index is another project (whose import
name is also ``redis_tasks``: the two cannot be installed side by side).
"""

from __future__ import annotations

from typing import Final

__all__ = ["DISTRIBUTION", "__version__", "install_hint"]

__version__ = "0.3.0.dev0"
#: What ``pip install`` takes: ``pip install 'redis-mcp-tasks[mcp]'``.
DISTRIBUTION: Final = "redis-mcp-tasks"


def install_hint(extra: str) -> str:
    """How to install ``extra``: by name, and, as the distribution is not on the package
    index yet, from a checkout (a ``pip install`` by name finds nothing there today)."""
    return (
        f"pip install '{DISTRIBUTION}[{extra}]' (not on the package index yet: from a "
        f"checkout, pip install -e '.[{extra}]')"
    )
