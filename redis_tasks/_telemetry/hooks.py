"""What metrics and traces share: a set of hooks bound as a whole, to a recorder or to no-ops.

The library calls each hook through one long-lived object (``METRICS.claimed(p)``,
``TRACES.run_span(...)``), so rebinding them all at once reaches every caller,
and a hook that is off costs one call of an empty function. Each is on unless
its environment variable says ``off`` (or ``0``, ``false``).
"""

from __future__ import annotations

import os
from typing import ClassVar

__all__ = ["HookSet", "nothing", "wanted"]


def nothing(*args: object) -> None:
    """Every hook while its set is off."""


def wanted(variable: str) -> bool:
    """Whether to record without being asked: unless ``$variable`` is off, 0 or false."""
    return os.environ.get(variable, "").strip().lower() not in ("off", "0", "false")


class HookSet:
    """Hooks named by :attr:`HOOKS`, bound together by :meth:`disable` and :meth:`bind`."""

    #: The hooks' attribute names.
    HOOKS: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        self.enabled = False
        self.disable()

    def disable(self) -> None:
        """Bind every hook to a no-op."""
        for name in self.HOOKS:
            setattr(self, name, nothing)
        self.enabled = False

    def bind(self, source: object) -> None:
        """Bind every hook to the attribute of the same name on ``source``."""
        for name in self.HOOKS:
            setattr(self, name, getattr(source, name))
        self.enabled = True
