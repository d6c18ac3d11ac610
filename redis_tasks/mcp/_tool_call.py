"""``ToolCall``: the origin a task-enabled ``tools/call`` is stored as, and read back from.

The server writes it when it creates the task; the worker reads it to run the
tool. It is framework data: the tool name, the validated arguments, the endpoint
the call arrived on and the capabilities the client declared (so a tool run by a
worker sees the same client as one run inline). It never appears in a ``repr``.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from redis_tasks._errors import ValidationError
from redis_tasks._limits import Limits
from redis_tasks._origin import TaskOrigin

__all__ = ["TaskSupport", "ToolCall"]

#: Bumped if the stored shape ever changes, so an old worker refuses a new task.
_VERSION: Final = 1
#: The shape with the input gathered before the task (``run_as_task``).
_INPUT_VERSION: Final = 2


class TaskSupport(enum.StrEnum):
    """How a tool takes part in tasks."""

    #: A task when the client declared the extension, an inline call otherwise.
    OPTIONAL = "optional"
    #: Always a task; a client without the extension gets ``-32021``.
    REQUIRED = "required"


@dataclass(frozen=True)
class ToolCall:
    """One ``tools/call``: what a worker needs to run the tool as the client asked."""

    tool: str
    arguments: Mapping[str, Any] = field(repr=False)
    endpoint: str = field(repr=False)
    client_capabilities: Mapping[str, Any] | None = field(default=None, repr=False)
    #: The answers gathered inline before the call became a task (``run_as_task``),
    #: and the tool's ``requestState`` of that round; ``None`` for a plain call.
    input_responses: Mapping[str, Any] | None = field(default=None, repr=False)
    request_state: str | None = field(default=None, repr=False)

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
        if self.input_responses is not None:
            # A worker that does not know these would run the tool without them.
            state["v"] = _INPUT_VERSION
            state["inputResponses"] = dict(self.input_responses)
            if self.request_state is not None:
                state["requestState"] = self.request_state
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
        responses = state.get("inputResponses")
        request_state = state.get("requestState")
        if (
            state.get("v") not in (_VERSION, _INPUT_VERSION)
            or not isinstance(tool, str)
            or not isinstance(arguments, dict)
            or not isinstance(endpoint, str)
            or not (capabilities is None or isinstance(capabilities, dict))
            or not (responses is None or isinstance(responses, dict))
            or not (request_state is None or isinstance(request_state, str))
        ):
            raise ValidationError("the task origin is not a tools/call made by TasksExtension")
        return cls(tool, arguments, endpoint, capabilities, responses, request_state)
