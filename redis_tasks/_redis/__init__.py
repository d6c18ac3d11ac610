"""The Redis backend: the manager, its work queue, scripts, keys, events and connections.

Everything that speaks to Redis lives in this package; nothing outside it imports
``redis`` except the CLI's and the MCP extension's connection set-up.
"""

from .manager import RedisTaskManager

__all__ = ["RedisTaskManager"]
