"""A manager on a Redis Cluster: any node's URL; the cluster is found from it. (Made, not
entered: nothing connects until ``async with manager``.)"""

from redis_tasks import RedisTaskManager

manager = RedisTaskManager.from_url(
    "redis://10.0.0.5:7000",
    timeout=6.0,
    wait_timeout=0.5,  # wait_replicas="auto": the default
)
