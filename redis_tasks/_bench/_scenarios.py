"""The benchmark scenarios, each run against one Redis URL.

``drain`` and ``pickup`` run any :class:`~._systems.System` (redis-tasks or a
peer) through its adapter processes, so every queue is measured by the same
code. ``lifecycle``, ``find`` and ``notify`` measure redis-tasks operations that
peers do not have, from this process. ``limit`` measures Redis itself with
``redis-benchmark`` running our scripts, the ceiling the other figures are
fractions of. ``fairness`` measures tenants sharing a worker (no peer has tenants).

The scenarios live in :mod:`._system_scenarios` (any system),
:mod:`._our_scenarios` and :mod:`._fairness` (redis-tasks only), on :mod:`._bench_base`;
:class:`Bench` has them all.
"""

from __future__ import annotations

from ._bench_base import Settings
from ._fairness import FairnessScenarios
from ._our_scenarios import OurScenarios, sized_origin
from ._parking import ParkingScenarios
from ._system_scenarios import SystemScenarios, pickup_figures

__all__ = ["Bench", "Settings", "pickup_figures", "sized_origin"]


class Bench(SystemScenarios, OurScenarios, FairnessScenarios, ParkingScenarios):
    """Runs scenarios against ``url``; adapter stderr goes to ``log``."""
