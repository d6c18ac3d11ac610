"""``ToolCall``: the origin a task-enabled ``tools/call`` is stored as, and read back from.

The server writes it when it creates the task; the worker reads it to run the
tool. It is framework data: the tool name, the validated arguments, the endpoint
the call arrived on and the capabilities the client declared (so a tool run by a
worker sees the same client as one run inline). It never appears in a ``repr``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from redis_tasks._errors import ValidationError
from redis_tasks._limits import Limits
from redis_tasks._origin import TaskOrigin

__all__ = ["ToolCall"]

#: Bumped if the stored shape ever changes, so an old worker refuses a new task.
_VERSION: Final = 1


@dataclass(frozen=True)
class ToolCall:
    """One ``tools/call``: what a worker needs to run the tool as the client asked."""

    tool: str
    arguments: Mapping[str, Any] = field(repr=False)
    endpoint: str = field(repr=False)
    client_capabilities: Mapping[str, Any] | None = field(default=None, repr=False)

    def to_origin(self, limits: Limits) -> TaskOrigin:
        """The task origin: canonical JSON, bounded by ``limits``."""
        state: dict[str, Any] = {
            "v": _VERSION,
            "tool": self.tool,
            "arguments": dict(self.arguments),
            "endpoint": self.endpoint,
        }
        if self.client_capabilities is not None:
            state["clientCapabilities"] = dict(self.client_capabilities)
        return TaskOrigin.from_persisted_state(
            state, max_bytes=limits.max_origin_bytes, max_depth=limits.max_origin_depth
        )

    @classmethod
    def from_origin(cls, origin: TaskOrigin) -> ToolCall:
        """Read a stored origin back; :class:`ValidationError` if it is not one of ours."""
        # The persisted text is canonical JSON; plain ``json`` gives the tool
        # floats rather than the exact decimals the origin codec keeps.
        state = json.loads(origin.to_persisted_string())
        tool = state.get("tool")
        arguments = state.get("arguments")
        endpoint = state.get("endpoint")
        capabilities = state.get("clientCapabilities")
        if (
            state.get("v") != _VERSION
            or not isinstance(tool, str)
            or not isinstance(arguments, dict)
            or not isinstance(endpoint, str)
            or not (capabilities is None or isinstance(capabilities, dict))
        ):
            raise ValidationError("the task origin is not a tools/call made by TasksExtension")
        return cls(tool, arguments, endpoint, capabilities)
