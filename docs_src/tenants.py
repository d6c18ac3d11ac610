"""Tenants: per-tenant limits, a create that names its organisation as the tenant, and a
table of plans. The Guides / Tenants page shows its two sections; the tests run them on a
real server (the quota refuses the 101st open task of an organisation)."""

# --8<-- [start:limits]
from redis_tasks import Limits, QuotaExceededError, RedisTaskManager, RequestContext, TaskOrigin

LIMITS = Limits(
    max_open_tasks_per_tenant=100,  # tasks not yet terminal, per tenant
    tenant_create_rate=5.0,  # creates a second, per tenant...
    tenant_create_burst=20,  # ...with bursts of up to 20
    max_running_tasks_per_tenant=8,  # handlers running at once, per tenant, across the fleet
)


async def create_for(manager: RedisTaskManager, org: str, user: str, plan: str) -> str | None:
    request = RequestContext(endpoint="/mcp", partition_key=f"user:{user}")
    origin = TaskOrigin.from_persisted_string('{"tool": "report", "arguments": {}}')
    try:
        task = await manager.create_task(
            request, origin, tenant=f"org:{org}", weight=3 if plan == "pro" else 1
        )
    except QuotaExceededError as refused:  # nothing was stored
        print(refused.reason, refused.retry_after)  # "quota", None / "rate", 0:00:00.200000
        return None
    return task.task_id


# --8<-- [end:limits]


# --8<-- [start:plans]
from redis_tasks import TenantPlan

PLANS = {
    "org:acme": TenantPlan(
        max_open_tasks=1_000, max_running_tasks=50, create_rate=100.0, weight=3, name="pro"
    ),
    "org:globex": TenantPlan(max_open_tasks=20, max_running_tasks=1, create_rate=2.0, name="free"),
}


def planned_manager(url: str) -> RedisTaskManager:
    # A tenant not in the table gets the default plan: the per-tenant fields of LIMITS.
    return RedisTaskManager.from_url(url, limits=LIMITS, plans=PLANS)


# --8<-- [end:plans]
