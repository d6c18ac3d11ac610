"""``redis-tasks tenants``: every tenant an operator may need to see, with its figures.

Where :mod:`.tenants` sums what ``inspect`` samples (who waits, who runs among the
oldest leases), this reads each tenant's own keys (``lua/inspect_tenants.lua``):
the tenants seen in the last day (a create kept its plan, or one was refused)
and those with tasks waiting, each with its open tasks (its quota's count), its
running tasks (its cap's count), its queued tasks, its plan as its latest create
kept it, and its refused creates by reason over the last day. A tenant that has
no limit has no open or run set: its open and running tasks are not counted
(running ones still show in ``inspect``'s sampled leases, which the command
merges in). Summed by digest over the partitions read.

A tenant is shown by its digest; an operator who names a key (``--tenant-key``)
sees it beside its digest, and nothing else ever shows one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from redis_tasks._plans import parse_plan
from redis_tasks._stats import REFUSED_FIELDS

__all__ = ["ORDERS", "TenantReport", "TenantRow", "render_tenants"]

#: What the top lists are ordered by.
ORDERS: Final = ("open", "queued", "running", "refused")


@dataclass(frozen=True, slots=True)
class TenantRow:
    """One tenant over the partitions read: its open, running and queued tasks, its
    refused creates by reason (the last day), its plan's terms (``None``: none kept),
    whether it waits in a ring or is parked at its cap somewhere, and its tasks
    waiting for their client's input (parked tasks: held by no worker)."""

    tenant: str
    open: int = 0
    running: int = 0
    queued: int = 0
    refused: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(REFUSED_FIELDS, 0))
    plan: Mapping[str, object] | None = None
    waiting: bool = False
    parked: bool = False
    waiting_for_input: int = 0

    @property
    def refused_total(self) -> int:
        """Creates refused, every reason."""
        return sum(self.refused.values())

    def merged(self, other: TenantRow) -> TenantRow:
        """This tenant's figures with another partition's added."""
        return replace(
            self,
            open=self.open + other.open,
            running=self.running + other.running,
            queued=self.queued + other.queued,
            refused={r: self.refused.get(r, 0) + other.refused.get(r, 0) for r in REFUSED_FIELDS},
            plan=self.plan or other.plan,
            waiting=self.waiting or other.waiting,
            parked=self.parked or other.parked,
            waiting_for_input=self.waiting_for_input + other.waiting_for_input,
        )

    def to_json(self, names: Mapping[str, str]) -> dict[str, Any]:
        """A JSON-ready dict; ``key`` is the tenant's key only where ``names`` has it."""
        return {
            "tenant": self.tenant,
            "key": names.get(self.tenant),
            "open": self.open,
            "running": self.running,
            "queued": self.queued,
            "refused": dict(self.refused),
            "plan": None if self.plan is None else dict(self.plan),
            "waiting": self.waiting,
            "parked": self.parked,
            "waiting_for_input": self.waiting_for_input,
        }


def _amount(row: TenantRow, order: str) -> int:
    """What ``order`` (one of :data:`ORDERS`) counts of ``row``."""
    if order == "refused":
        return row.refused_total
    return int(getattr(row, order))


class TenantReport:
    """Every tenant read (see the module), by digest, over the partitions read;
    ``complete`` is false when some partition had more tenants than were read."""

    def __init__(self, rows: Iterable[TenantRow], *, complete: bool, partitions: int) -> None:
        found: dict[str, TenantRow] = {}
        for row in rows:
            seen = found.get(row.tenant)
            found[row.tenant] = row if seen is None else seen.merged(row)
        #: Every tenant read, by digest.
        self.rows: Mapping[str, TenantRow] = found
        self.complete = complete
        self.partitions = partitions

    @staticmethod
    def parse(flat: list[Any]) -> list[TenantRow]:
        """The rows of one partition's ``inspect_tenants`` reply (nine a tenant)."""
        out = []
        for i in range(0, len(flat) - 8, 9):
            tenant, open_, running, queued, terms, quota, rate, waiting, asking = flat[i : i + 9]
            text = terms.decode() if isinstance(terms, bytes) else str(terms)
            out.append(
                TenantRow(
                    tenant=tenant.decode() if isinstance(tenant, bytes) else str(tenant),
                    open=int(open_),
                    running=int(running),
                    queued=int(queued),
                    refused={"quota": int(quota), "rate": int(rate)},
                    plan=parse_plan(text) if text else None,
                    waiting=int(waiting) == 1,
                    parked=int(waiting) == 2,
                    waiting_for_input=int(asking),
                )
            )
        return out

    def with_running(self, running: Mapping[str, int]) -> TenantReport:
        """This report, each tenant's running tasks at least as many as ``running``
        counts (``inspect``'s sampled leases, by digest: uncapped tenants have no run
        set); a tenant found there only is added."""
        rows = dict(self.rows)
        for tenant, count in running.items():
            row = rows.get(tenant) or TenantRow(tenant)
            rows[tenant] = replace(row, running=max(row.running, count))
        return TenantReport(rows.values(), complete=self.complete, partitions=self.partitions)

    def top(self, order: str, count: int) -> list[TenantRow]:
        """The ``count`` tenants with the most of ``order`` (one of :data:`ORDERS`),
        those with none left out."""
        if order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}")
        found = [r for r in self.rows.values() if _amount(r, order) > 0]
        found.sort(key=lambda r: (-_amount(r, order), -r.open, -r.queued, r.tenant))
        return found[:count]

    def named(self, names: Mapping[str, str]) -> list[tuple[str, TenantRow]]:
        """Each named tenant (key, figures), in the order named; zeros for one unseen."""
        return [(key, self.rows.get(d) or TenantRow(d)) for d, key in names.items()]

    def to_json(self, names: Mapping[str, str] | None = None, *, top: int = 10) -> dict[str, Any]:
        """A JSON-ready dict: totals, the top tenants by each order, the named ones."""
        names = names or {}
        rows = self.rows.values()
        return {
            "partitions": self.partitions,
            "complete": self.complete,
            "tenants": len(self.rows),
            "open": sum(r.open for r in rows),
            "running": sum(r.running for r in rows),
            "queued": sum(r.queued for r in rows),
            "waiting_for_input": sum(r.waiting_for_input for r in rows),
            "refused": {
                reason: sum(r.refused.get(reason, 0) for r in rows) for reason in REFUSED_FIELDS
            },
            "top": {order: [r.to_json(names) for r in self.top(order, top)] for order in ORDERS},
            "named": [r.to_json(names) for _, r in self.named(names)],
        }


def _plan_text(plan: Mapping[str, object] | None) -> str:
    """A plan's terms in a few words (``-``: none kept)."""
    if plan is None:
        return "-"
    terms = [f"w{plan.get('weight')}"]
    if plan.get("max_open_tasks"):
        terms.append(f"open<={plan['max_open_tasks']}")
    if plan.get("max_running_tasks"):
        terms.append(f"run<={plan['max_running_tasks']}")
    if plan.get("create_rate"):
        terms.append(f"{plan['create_rate']:g}/s burst {plan.get('create_burst')}")
    name = plan.get("name")
    return (f"{name}: " if name else "") + " ".join(terms)


def render_tenants(report: TenantReport, names: Mapping[str, str], *, top: int) -> list[str]:
    """``report`` as the lines ``redis-tasks tenants`` prints: totals, then the top
    ``top`` tenants by open, queued, running and refused tasks, then the named ones.
    A tenant is its digest, with its key beside it only where ``names`` has it."""
    rows = list(report.rows.values())
    refused = {reason: sum(r.refused.get(reason, 0) for r in rows) for reason in REFUSED_FIELDS}
    lines = [
        f"tenants: {len(rows)} over {report.partitions} partition(s)"
        + ("" if report.complete else " (sampled: more than --sample in some partition)"),
        f"  open {sum(r.open for r in rows)}, running {sum(r.running for r in rows)}, "
        f"queued {sum(r.queued for r in rows)}, waiting for input "
        f"{sum(r.waiting_for_input for r in rows)}; refused in the last day: "
        + ", ".join(f"{reason} {count}" for reason, count in refused.items()),
    ]

    def table(title: str, chosen: Iterable[tuple[str | None, TenantRow]]) -> None:
        found = list(chosen)
        if not found:
            return
        lines.append("")
        lines.append(title)
        lines.append(
            f"  {'tenant':<14}{'open':>7}{'running':>9}{'queued':>8}{'input':>7}{'refused':>9}"
            "  state    plan"
        )
        for key, row in found:
            state = "parked" if row.parked else "waiting" if row.waiting else "-"
            lines.append(
                f"  {row.tenant:<14}{row.open:>7}{row.running:>9}{row.queued:>8}"
                f"{row.waiting_for_input:>7}{row.refused_total:>9}  {state:<8} "
                f"{_plan_text(row.plan)}" + (f"  [key {key!r}]" if key is not None else "")
            )

    for order in ORDERS:
        table(f"top {top} by {order}:", [(names.get(r.tenant), r) for r in report.top(order, top)])
    table("named:", report.named(names))
    return lines
