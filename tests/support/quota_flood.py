"""One process of the quota-exactness test: many concurrent creates of one tenant.

``python -m tests.support.quota_flood URL PREFIX CREATES QUOTA [--cluster]`` fires
``CREATES`` ``create_task`` calls at once against a manager whose Limits give each
tenant ``QUOTA`` open tasks, all for the same tenant, and prints one JSON line:
how many were accepted, refused by the quota, and failed otherwise (by type).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter

from redis_tasks import Limits, QuotaExceededError, RedisTaskManager

from .helpers import ALICE, ORIGIN


async def flood(url: str, prefix: str, creates: int, quota: int) -> Counter[str]:
    """Fire ``creates`` creates of one tenant at once; count their outcomes."""
    outcomes: Counter[str] = Counter()
    limits = Limits(max_open_tasks_per_tenant=quota)
    async with RedisTaskManager.from_url(url, prefix=prefix, limits=limits) as manager:

        async def one() -> None:
            try:
                await manager.create_task(ALICE, ORIGIN, tenant="org:flood")
            except QuotaExceededError as exc:
                outcomes[f"refused:{exc.reason}"] += 1
            except Exception as exc:  # any other failure is counted, not hidden
                outcomes[f"error:{type(exc).__name__}"] += 1
            else:
                outcomes["accepted"] += 1

        await asyncio.gather(*(one() for _ in range(creates)))
    return outcomes


def main() -> None:
    """Parse the arguments, run the flood, print the counts."""
    url, prefix, creates, quota = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(asyncio.run(flood(url, prefix, creates, quota))))


if __name__ == "__main__":
    main()
