"""The text ``redis-tasks inspect`` prints: the queues' totals and tables, the tenants,
one task's bookkeeping, and the rates between two readings of ``--watch``.

Plain functions from :mod:`redis_tasks._inspection` values to lines, so the command line
and its tests share them; nothing here reads Redis. Tenants are shown by digest;
``names`` (digest to key, what ``--tenant-key`` asks for) adds a key beside its
digest, and only there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Final

from .partition import PartitionView
from .queues import Inspection, Rates
from .task import TaskInspection
from .tenants import TenantFigures, TenantSummary

__all__ = ["duration", "render_inspection", "render_task"]

#: Lease rows shown at most (the JSON output has every sampled one).
MAX_LEASE_ROWS: Final = 20
#: Consumer rows shown at most.
MAX_CONSUMER_ROWS: Final = 20


def duration(ms: float | None) -> str:
    """``ms`` for a person: ``"-"``, ``"850 ms"``, ``"4.2 s"``, ``"3 min"``, ``"2.5 h"``."""
    if ms is None:
        return "-"
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    if ms < 1_000:
        return f"{sign}{ms:.0f} ms"
    if ms < 60_000:
        return f"{sign}{ms / 1000:.1f} s"
    if ms < 3_600_000:
        return f"{sign}{ms / 60_000:.0f} min"
    return f"{sign}{ms / 3_600_000:.1f} h"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in (header, *rows)
    ]


def _stamp(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _rates_line(rates: Rates) -> str:
    """One line of rates for the top of a redraw."""
    return (
        f"rates      created {rates.created_per_s:,.1f}/s  ended {rates.ended_per_s:,.1f}/s"
        f"  pickup p50 {duration(rates.pickup_p50)}  p99 {duration(rates.pickup_p99)}"
        f"  ({rates.claims} first claims)"
    )


def _partition_row(p: PartitionView) -> list[str]:
    ended = sum(p.ended.values())
    return [
        str(p.partition),
        p.node,
        str(p.entries),
        str(p.backlog),
        str(p.pending),
        str(p.tenants.queued),
        str(p.tenants.waiting),
        duration(p.oldest_waiting_ms),
        str(len(p.consumers)),
        str(p.created),
        str(ended),
        duration(p.pickup.quantile(0.5)),
    ]


def render_inspection(
    inspection: Inspection,
    *,
    prefix: str,
    expiring_ms: int,
    rates: Rates | None = None,
    names: Mapping[str, str] | None = None,
) -> list[str]:
    """The whole report of ``redis-tasks inspect``, line by line (``names``: the keys
    of the tenants an operator named, by digest)."""
    statuses = inspection.statuses
    tenants = inspection.tenants
    pickup = inspection.pickup
    topology = "cluster" if inspection.cluster else "standalone"
    lines = [
        f"redis-tasks inspect  prefix {prefix}  {len(inspection.partitions)} partitions"
        f"  {topology}  {_stamp(inspection.server_ms)}",
        "tasks      "
        + "  ".join(f"{name} {count:,}" for name, count in statuses.items())
        + f"  (created {inspection.created:,})",
        f"queue      entries {inspection.entries:,}  queued {tenants.queued:,}"
        f"  backlog {inspection.backlog:,}  pending {inspection.pending:,}"
        f"  oldest waiting {duration(inspection.oldest_waiting_ms)}"
        f"  oldest pending {duration(inspection.oldest_pending_ms)}",
        f"pickup     p50 {duration(pickup.quantile(0.5))}  p99 {duration(pickup.quantile(0.99))}"
        f"  ({pickup.total:,} first claims)",
        _tenants_line(tenants),
    ]
    if rates is not None:
        lines.append(_rates_line(rates))
    lines.append("")
    lines += _table(
        [
            "partition",
            "node",
            "entries",
            "backlog",
            "pending",
            "queued",
            "tenants",
            "oldest waiting",
            "consumers",
            "created",
            "ended",
            "pickup p50",
        ],
        [_partition_row(p) for p in inspection.partitions],
    )
    consumers = inspection.consumers()
    lines += ["", f"consumers ({len(consumers)})"]
    if consumers:
        lines += _table(
            ["name", "pending", "idle"],
            [[c.name, str(c.pending), duration(c.idle_ms)] for c in consumers[:MAX_CONSUMER_ROWS]],
        )
    lines += _tenant_tables(tenants, names or {})
    leases = inspection.leases()
    expiring = inspection.expiring(expiring_ms)
    scope = "sampled" if inspection.sampled else "pending"
    lines += [
        "",
        f"leases expiring within {duration(expiring_ms)}: {len(expiring)} of {len(leases)} {scope}",
    ]
    if expiring:
        lines += _table(
            ["task", "partition", "status", "owner", "fence", "attempt", "left", "deliveries"],
            [
                [
                    lease.task or "(entry of no task)",
                    str(lease.partition),
                    lease.status or "expired",
                    lease.lease_owner or "-",
                    str(lease.fence),
                    str(lease.attempt),
                    duration(lease.remaining_ms),
                    str(lease.deliveries),
                ]
                for lease in expiring[:MAX_LEASE_ROWS]
            ],
        )
    return lines


def _tenants_line(tenants: TenantSummary) -> str:
    refused = tenants.refused
    return (
        f"tenants    waiting {tenants.waiting:,} (counted per partition;"
        f" {tenants.distinct:,} distinct{' read' if tenants.sampled else ''})"
        f"  parked {tenants.parked:,}  deferred {tenants.deferred:,}"
        f"  tasks waiting for input {tenants.waiting_for_input:,}"
        f"  refused quota {refused.get('quota', 0):,}  rate {refused.get('rate', 0):,}"
    )


def _tenant_name(digest: str, names: Mapping[str, str]) -> str:
    key = names.get(digest)
    return digest if key is None else f"{digest} ({key})"


def _tenant_rows(found: Sequence[TenantFigures], names: Mapping[str, str]) -> list[str]:
    return _table(
        ["tenant", "backlog", "running", "oldest waiting", "parked"],
        [
            [
                _tenant_name(f.tenant, names),
                f"{f.backlog:,}",
                f"{f.running:,}",
                duration(f.oldest_ms),
                "yes" if f.parked else "-",
            ]
            for f in found
        ],
    )


def _tenant_tables(tenants: TenantSummary, names: Mapping[str, str]) -> list[str]:
    """The top tenants by backlog and by running, and each named one."""
    lines = []
    for title, sampled, found in (
        ("tenants by backlog", tenants.sampled, tenants.by_backlog()),
        ("tenants by running", tenants.leases_sampled, tenants.by_running()),
    ):
        lines += ["", f"{title}{' (sampled)' if sampled else ''} ({len(found)})"]
        if found:
            lines += _tenant_rows(found, names)
    named = tenants.named(names)
    if named:
        lines += ["", f"named tenants ({len(named)})"]
        lines += _tenant_rows([f for _, f in named], names)
    return lines


def render_task(task: TaskInspection, names: Mapping[str, str] | None = None) -> list[str]:
    """``redis-tasks inspect TASK_ID``: one task's bookkeeping, a field a line."""
    now = task.server_ms
    entry = task.entry_state or "none"
    if task.entry_state == "queued":
        entry = "queued: in its tenant's queue"
    if task.entry_state == "parked":
        entry = "parked: waiting for input, held by no worker"
    if task.entry_state == "leased":
        entry = f"leased to {task.entry_consumer}, no work entry (a direct claim)"
    if task.entry_state == "delivered":
        entry = (
            f"delivered to {task.entry_consumer}, idle {duration(task.entry_idle_ms)},"
            f" {task.entry_deliveries} deliveries"
        )
    rows = [
        ("task", task.task_id),
        ("partition", str(task.partition)),
        ("status", task.status),
        ("tenant", "-" if task.tenant is None else _tenant_name(task.tenant, names or {})),
        ("created", f"{_stamp(task.created_ms)} ({duration(now - task.created_ms)} ago)"),
        ("updated", f"{_stamp(task.updated_ms)} ({duration(now - task.updated_ms)} ago)"),
        (
            "expires",
            "never"
            if task.expires_ms is None
            else f"{_stamp(task.expires_ms)} (in {duration(task.expires_ms - now)})",
        ),
        ("poll interval", duration(task.poll_interval_ms)),
        ("attempts", str(task.attempts)),
        ("fence", str(task.fence)),
        ("lease owner", task.lease_owner or "-"),
        (
            "lease deadline",
            "-"
            if task.lease_deadline_ms is None
            else f"{_stamp(task.lease_deadline_ms)} ({duration(task.lease_remaining_ms)} left)",
        ),
        ("cancel asked", "yes" if task.cancellation_requested else "no"),
        ("input requests", f"{task.input_requests} outstanding"),
        ("parked", f"{task.parks} times" if task.parks != 1 else "once"),
        ("error code", "-" if task.error_code is None else str(task.error_code)),
        ("work entry", f"{task.entry_id or '-'} ({entry})"),
    ]
    width = max(len(name) for name, _ in rows)
    return [f"{name.ljust(width)}  {value}" for name, value in rows]
