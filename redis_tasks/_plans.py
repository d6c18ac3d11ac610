"""Tenant plans: the per-tenant limits and weight a create applies, plan by plan.

A service with free and paid plans gives each its own quota, running cap, create
rate and weight ("free: 20 open tasks, 1 running, 2 creates a second; pro: 1,000,
50, 100"). :class:`TenantPlan` is one such plan; a manager resolves the plan of
each create (:func:`resolve_plan`): the ``plan`` the call names, else what the
manager's policy (``plans=``: a table from tenant key to plan, or a callable)
gives for the call's tenant, else the default plan, the per-tenant fields of
:class:`~redis_tasks.Limits`. The plan travels with the create to its script,
which checks the quota and the rate and stores the weight and cap where dispatch
reads them, so a plan that changes applies from the tenant's next create: its
quota and rate at once, its weight and cap to the dispatches and claims after
(tasks already queued start under the new cap). Running tasks are never stopped
by a change; a quota lowered below what a tenant holds refuses its creates until
enough have ended. A plan counts what was created under a plan with the same
kind of limit: a tenant moved from an unlimited plan to a limited one has its
later tasks in its home partition, where only they count against its quota and
cap.

A plan is checked where it is used, at create (:func:`plan_terms`): a policy's bad
output (a negative quota, a weight over ``Limits.max_tenant_weight``, a value of
the wrong type) raises :class:`ValidationError` or :class:`LimitExceededError`
and stores nothing; the messages never name the tenant. This module imports only
the errors and the limits.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from ._errors import LimitExceededError, ValidationError
from ._limits import MAX_CREATE_RATE, MIN_CREATE_RATE, Limits

__all__ = [
    "PlanPolicy",
    "PlanTerms",
    "TenantPlan",
    "check_policy",
    "parse_plan",
    "plan_terms",
    "resolve_plan",
]

#: A plan's name: a label an operator reads (``redis-tasks tenants``), never a secret.
_NAME: Final = re.compile(r"[A-Za-z0-9_.:\-]{1,32}")


@dataclass(frozen=True, slots=True)
class TenantPlan:
    """One tenant's limits and weight (``None``: no such limit).

    ``max_open_tasks`` caps its tasks not yet terminal; ``max_running_tasks`` its
    tasks running at once across the whole worker fleet; ``create_rate`` how many it
    creates a second, ``create_burst`` at once (default: the rate rounded up);
    ``weight`` its share of the workers while tenants compete (1 to
    ``Limits.max_tenant_weight``); ``name`` a label operators see beside the terms
    (1 to 32 of ``A-Za-z0-9_.:-``). A plan with any limit keeps the tenant's tasks
    in its home partition, where one script sees them all. Checked at create.
    """

    max_open_tasks: int | None = None
    max_running_tasks: int | None = None
    create_rate: float | None = None
    create_burst: int | None = None
    weight: int = 1
    name: str | None = None

    @property
    def limited(self) -> bool:
        """Whether a limit counts per tenant (its tasks then share its home partition)."""
        return (
            self.max_open_tasks is not None
            or self.max_running_tasks is not None
            or self.create_rate is not None
        )

    @staticmethod
    def of_limits(limits: Limits) -> TenantPlan:
        """The default plan: ``limits``' per-tenant fields, weight 1."""
        return TenantPlan(
            max_open_tasks=limits.max_open_tasks_per_tenant,
            max_running_tasks=limits.max_running_tasks_per_tenant,
            create_rate=limits.tenant_create_rate,
            create_burst=limits.tenant_create_burst,
        )


#: A manager's plans: a table from tenant key to plan, or a callable from the tenant
#: key a create names (``None`` for a tenant that is its binding) to its plan;
#: a missing key, or ``None``, means the default plan.
PlanPolicy = Mapping[str, TenantPlan] | Callable[[str | None], "TenantPlan | None"]


@dataclass(frozen=True, slots=True)
class PlanTerms:
    """A checked plan, as a create's script takes it (0 where no limit applies)."""

    weight: int
    cap: int
    max_open: int
    #: The GCRA's emission interval (µs a create) and tolerance (burst - 1 intervals).
    rate_us: int
    burst_us: int
    home: bool
    #: Whether the weight and cap came from a plan or a weight the create named
    #: (then they are stored even when they are the defaults, so a tenant moved to
    #: the default plan is dispatched by it at once, not after its queue drained).
    named: bool = False
    #: What the create stores for operators (``redis-tasks tenants``) of a plan that
    #: was named or limits: its terms and name (:func:`parse_plan`); "" for none.
    text: str = ""


def parse_plan(text: str) -> dict[str, object]:
    """A stored plan's terms (:attr:`PlanTerms.text`) as operators read them: weight,
    cap, quota, rate (creates a second), burst and name (``None`` where none)."""
    weight, cap, max_open, rate_us, burst_us, name = (text.split(" ", 5) + [""] * 6)[:6]
    rate = 1_000_000 / int(rate_us) if rate_us.isdigit() and int(rate_us) else None
    interval = int(rate_us) if rate_us.isdigit() else 0
    burst = int(burst_us) // interval + 1 if rate is not None and burst_us.isdigit() else None
    return {
        "name": name or None,
        "weight": int(weight) if weight.isdigit() else None,
        "max_running_tasks": int(cap) or None if cap.isdigit() else None,
        "max_open_tasks": int(max_open) or None if max_open.isdigit() else None,
        "create_rate": None if rate is None else round(rate, 6),
        "create_burst": burst,
    }


def resolve_plan(
    limits: Limits, policy: PlanPolicy | None, tenant: str | None, plan: object
) -> tuple[object, bool]:
    """The plan a create applies: ``plan`` when the call names one, else the policy's
    for ``tenant``, else the default plan of ``limits``; and whether it was named
    (by the call or the policy). Unchecked (see :func:`plan_terms`); a policy that
    raises raises here."""
    if plan is not None:
        return plan, True
    if policy is not None:
        if callable(policy):
            found: object = policy(tenant)
        else:
            found = policy.get(tenant) if tenant is not None else None
        if found is not None:
            return found, True
    return TenantPlan.of_limits(limits), False


def _count(plan: TenantPlan, name: str) -> int:
    """A plan's count field, 0 for none; anything but ``None`` or an int >= 1 is refused."""
    value = getattr(plan, name)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValidationError(f"a tenant plan's {name} must be an int or None")
    if value < 1:
        raise LimitExceededError(f"a tenant plan's {name} must be at least 1, or None")
    return value


def plan_terms(limits: Limits, plan: object, weight: object, *, named: bool = False) -> PlanTerms:
    """Check ``plan`` (and the create's own ``weight``, which overrides the plan's
    unless ``None``) against ``limits``; what its script needs (``named``: the plan
    was named, see :attr:`PlanTerms.named`). Raises
    :class:`ValidationError` for a value of the wrong type and
    :class:`LimitExceededError` for one out of bounds."""
    if not isinstance(plan, TenantPlan):
        raise ValidationError("a tenant plan must be a TenantPlan or None")
    named = named or weight is not None
    if weight is None:
        weight = plan.weight
    if not isinstance(weight, int) or isinstance(weight, bool):
        raise ValidationError("weight must be an int")
    if not 1 <= weight <= limits.max_tenant_weight:
        raise LimitExceededError(f"weight must be 1 to {limits.max_tenant_weight}")
    cap, max_open = _count(plan, "max_running_tasks"), _count(plan, "max_open_tasks")
    burst = _count(plan, "create_burst")
    rate = plan.create_rate
    rate_us = burst_us = 0
    if rate is not None:
        if isinstance(rate, bool) or not isinstance(rate, int | float):
            raise ValidationError("a tenant plan's create_rate must be a number or None")
        if not MIN_CREATE_RATE <= rate <= MAX_CREATE_RATE:
            raise LimitExceededError(
                f"a tenant plan's create_rate must be {MIN_CREATE_RATE} to "
                f"{MAX_CREATE_RATE:,} creates a second, or None"
            )
        rate_us = max(1, round(1_000_000 / rate))
        burst_us = ((burst or max(1, math.ceil(rate))) - 1) * rate_us
    elif burst:
        raise ValidationError("a tenant plan's create_burst needs a create_rate")
    name = plan.name
    if name is not None and (not isinstance(name, str) or not _NAME.fullmatch(name)):
        raise ValidationError("a tenant plan's name must be 1 to 32 of A-Za-z0-9_.:-, or None")
    home = bool(cap or max_open or rate_us)
    text = f"{weight} {cap} {max_open} {rate_us} {burst_us} {name or ''}".rstrip()
    return PlanTerms(
        weight=weight,
        cap=cap,
        max_open=max_open,
        rate_us=rate_us,
        burst_us=burst_us,
        home=home,
        named=named,
        text=text if named or home else "",
    )


def check_policy(limits: Limits, policy: PlanPolicy | None) -> None:
    """Refuse, when the manager is made, a table of plans one of which every create of
    its tenant would be refused for; a callable's plans are checked at each create."""
    if policy is None or callable(policy):
        return
    if not isinstance(policy, Mapping):
        raise TypeError("plans must be a mapping of tenant keys to TenantPlan, or a callable")
    for key, plan in policy.items():
        if not isinstance(key, str):
            raise TypeError("plans' keys must be tenant keys (str)")
        plan_terms(limits, plan, None)
