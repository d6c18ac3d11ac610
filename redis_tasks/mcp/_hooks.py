"""The application's hooks on a task-enabled call: who asks (the authorizer), which
tenant the task counts against, with what weight and on which plan, and its work
payload.

Each runs in the request; a hook that fails is the server's failure, not the
client's: ``-32603`` and a log line naming the exception type only (its text may
hold a tenant key or a credential). An ``MCPError`` a hook raises goes to the
client as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolRequestParams

from redis_tasks._limits import Limits
from redis_tasks._models import RequestContext
from redis_tasks._origin import TaskOrigin
from redis_tasks._plans import TenantPlan

from ._auth import Authorizer
from ._wire import internal_error

__all__ = [
    "BoundPayload",
    "PayloadFactory",
    "PlanFactory",
    "TenantFactory",
    "WeightFactory",
    "authorize",
    "check_weight",
    "payload_of",
    "tenant_of",
]

logger = logging.getLogger("redis_tasks.mcp")

#: Makes a payload bound to its task: given the new task's ID, the caller's binding (the
#: request context the task is bound to) and the task's origin, before anything is stored.
BoundPayload = Callable[[str, RequestContext, TaskOrigin], bytes]
#: Builds the task's work payload from the call (default: empty): the bytes, or a
#: :data:`BoundPayload` for a payload that names its task and caller (a sealed snapshot).
PayloadFactory = Callable[
    [CallToolRequestParams, ServerRequestContext[Any, Any]], bytes | BoundPayload
]
#: Names the tenant the call's task counts against (``None``: its binding, the default).
TenantFactory = Callable[[CallToolRequestParams, ServerRequestContext[Any, Any]], str | None]
#: Gives the weight of the call's tenant (its share of the workers while tenants compete;
#: ``None``: its plan's).
WeightFactory = Callable[[CallToolRequestParams, ServerRequestContext[Any, Any]], int | None]
#: Gives the plan of the call's tenant (``None``: the manager's policy, or the default).
PlanFactory = Callable[[CallToolRequestParams, ServerRequestContext[Any, Any]], TenantPlan | None]


def check_weight(weight: int | WeightFactory | None, limits: Limits) -> None:
    """Refuse a fixed ``weight`` out of ``limits`` (a hook's is checked per call;
    ``None`` leaves the weight to the tenant's plan)."""
    if (
        weight is not None
        and not callable(weight)
        and (
            not isinstance(weight, int)
            or isinstance(weight, bool)
            or not 1 <= weight <= limits.max_tenant_weight
        )
    ):
        # A fixed weight is known now: better a startup error than every call refused.
        raise ValueError(f"weight must be 1 to {limits.max_tenant_weight}")


def authorize(authorizer: Authorizer, ctx: ServerRequestContext[Any, Any]) -> RequestContext:
    """The binding ``authorizer`` gives the request."""
    try:
        request = authorizer(ctx)
    except MCPError:
        raise
    except Exception as exc:
        logger.error("authorizer failed: %s", type(exc).__name__)
        raise internal_error() from None
    if not isinstance(request, RequestContext):
        logger.error("authorizer returned %s, not a RequestContext", type(request).__name__)
        raise internal_error()
    return request


def tenant_of(
    tenant: TenantFactory | None,
    weight: int | WeightFactory | None,
    plan: PlanFactory | None,
    params: CallToolRequestParams,
    ctx: ServerRequestContext[Any, Any],
) -> tuple[str | None, int | None, TenantPlan | None]:
    """The tenant, weight and plan the application's hooks give this call."""
    try:
        named = tenant(params, ctx) if tenant is not None else None
        if callable(weight):
            weight = weight(params, ctx)
        chosen = plan(params, ctx) if plan is not None else None
    except MCPError:
        raise
    except Exception as exc:
        logger.error("tenant, weight or plan hook failed: %s", type(exc).__name__)
        raise internal_error() from None
    if named is not None and not isinstance(named, str):
        logger.error("tenant hook returned %s, not a str or None", type(named).__name__)
        raise internal_error()
    if weight is not None and (not isinstance(weight, int) or isinstance(weight, bool)):
        logger.error("weight hook returned %s, not an int", type(weight).__name__)
        raise internal_error()
    if chosen is not None and not isinstance(chosen, TenantPlan):
        logger.error("plan hook returned %s, not a TenantPlan or None", type(chosen).__name__)
        raise internal_error()
    return named, weight, chosen


def payload_of(
    factory: PayloadFactory | None,
    params: CallToolRequestParams,
    ctx: ServerRequestContext[Any, Any],
    request: RequestContext,
    origin: TaskOrigin,
) -> bytes | Callable[[str], bytes]:
    """What the manager's create takes as the call's payload: empty without a factory,
    the factory's bytes, or its :data:`BoundPayload` given the call's binding and origin
    (the manager gives it the new task's ID)."""
    made = factory(params, ctx) if factory is not None else b""
    if not callable(made):
        return made

    def payload(task_id: str) -> bytes:
        return made(task_id, request, origin)

    return payload
