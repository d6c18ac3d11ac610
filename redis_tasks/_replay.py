"""The answered rounds a replaying run gets with its claim, so they need no call.

Why: a resumed task's run (it was parked while it waited for its client) starts its
handler from the top, and every round it asks again was answered before. Asked of
Redis (``request_input``), each such round was one round trip before the handler
could go on: with a worker's slots all busy re-running a thousand answered tasks,
that call was a third of the time each run held its slot. The claim now brings the
answers recorded for the task (``lua/includes/claim.lua``'s ``recorded_answers``),
and a round they answer returns from them.

Exactly what the call would have done, never more: the claim brings answers only
while the task is ``working`` (a round outstanding goes to the call, which may
supersede it) and none whose answer waits untaken (the call takes those); a round
returns from them only if each of its keys was answered to an equal request (the
same fingerprint: a key reused for another request goes to the call, which refuses
it), after the same validation of the round and its message, against the manager's
limits, as the call's. The worker stops using them once a round of this run was
left unanswered (the task is then ``input_required``).

Cost: the claim of a replaying task reads its journal and the fingerprints of its
issued keys (two or three commands more); a first claim reads nothing more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ._limits import Limits
from ._models import InputRequest
from ._record.decode import decode_answers
from ._record.encoder import Encoder

__all__ = ["RecordedAnswers"]


class RecordedAnswers:
    """The answers a claim brought, by input key: ``(request fingerprint, packed answer)``."""

    __slots__ = ("_by_key", "_encoder")

    def __init__(self, recorded: Iterable[tuple[bytes, bytes, bytes]], limits: Limits) -> None:
        self._by_key = {key: (fingerprint, answer) for key, fingerprint, answer in recorded}
        self._encoder = Encoder(limits)

    def round(
        self, requests: Mapping[str, InputRequest], status_message: str | None
    ) -> dict[str, Any] | None:
        """The answers to ``requests`` when every key was answered to an equal request,
        else ``None`` (the round is asked of the manager). Raises what the manager's
        call raises for a bad round or message."""
        encoded = self._encoder.input_requests(requests)
        self._encoder.status_message(status_message)
        pairs: list[bytes] = []
        for request in encoded:
            known = self._by_key.get(request.key)
            if known is None or known[0] != request.fingerprint:
                return None
            pairs += (request.key, known[1])
        return decode_answers(pairs)
