"""The caller of a task tool, kept with its task: the access token and the HTTP headers.

A FastMCP tool reads who called it with ``get_access_token()`` and
``get_http_headers()``. A worker has no request, so the server keeps both with the
task, as its payload (opaque bytes the worker gets back at each claim), and the
worker restores them around the tool's run (:func:`._fastmcp.worker_request`).

What is kept is a credential: the token itself, and every header (``authorization``
and ``cookie`` included, as ``get_http_headers(include_all=True)`` returns them in the
request). It never reaches a log or a ``repr``, and with a :class:`SnapshotKey` it is
sealed with AES-256-GCM before it reaches Redis, so a reader of Redis (a backup, a
replica, ``MONITOR``) sees ciphertext; the key is derived once with HKDF-SHA256 from
the secret given (use a random one: ``python -c "import secrets;
print(secrets.token_urlsafe(32))"``).

**Bound to its task and its caller.** A writer of Redis (another application on the
same server, a leaked password) must not choose who a tool runs as. So the seal's
associated data names the task (its ID) and what the worker will run (a SHA-256 of
the task's origin: tool, arguments, endpoint): a snapshot copied into another task,
or a task whose tool or arguments were rewritten, fails to open. The caller's
binding (endpoint and partition key) is sealed inside, and the worker checks it
against the task's record before the tool runs (:meth:`~redis_tasks.TaskExecution.
bound_to`, the check ``tasks/get`` makes). Under a key, a payload that is not sealed
and bound (plain, or sealed before binding) is refused: anyone can write one. The
move from no key to a key leaves tasks made before it plain: ``accept_unbound=True``
(``$REDIS_TASKS_ACCEPT_UNBOUND_SNAPSHOTS=1``) takes them for that while, off by default.

Bytes, first byte the format: ``P`` then the JSON text (no key); ``B`` then the
key's 8-byte ID, the 12-byte nonce and the sealed JSON (bound); ``S`` (sealed,
unbound: before the binding) is read only under ``accept_unbound``. The key ID (an
HKDF output of the secret, not the key) tells a snapshot sealed with another key
from one tampered with or moved to another task.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from fastmcp.server.auth import AccessToken

from redis_tasks._models import RequestContext
from redis_tasks._origin import TaskOrigin

__all__ = ["CallerSnapshot", "SnapshotError", "SnapshotKey", "warn_without_key"]

logger = logging.getLogger("redis_tasks.fastmcp")

_PLAIN: Final = b"P"
_SEALED_UNBOUND: Final = b"S"
_BOUND: Final = b"B"
_NONCE_BYTES: Final = 12
_KEY_ID_BYTES: Final = 8
#: Derives the sealing key; and names the seal in the associated data.
_CONTEXT: Final = b"redis-tasks fastmcp caller snapshot v1"
_BOUND_CONTEXT: Final = b"redis-tasks fastmcp caller snapshot v2 bound"
#: Derives the key's ID (shown, unlike the key).
_KEY_ID_CONTEXT: Final = b"redis-tasks fastmcp snapshot key id"
#: A secret shorter than this is refused: it would be guessable from the ciphertext.
MIN_SECRET_CHARS: Final = 16


class SnapshotError(ValueError):
    """A task's caller snapshot cannot be read, or must not be: the message says why,
    never the content; ``reason`` is one of ``missing_key`` (sealed, and this worker has
    no key), ``wrong_key`` (sealed with another key), ``not_bound`` (tampered with, moved
    to another task, or the task's caller is another), ``unbound`` (not sealed and bound
    where a key is set) and ``unreadable``."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def _derive(raw: bytes, info: bytes, length: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info).derive(raw)


def _bound_data(task_id: str, origin: TaskOrigin) -> bytes:
    """The associated data of a bound seal: the task's ID and a digest of its origin."""
    digest = hashlib.sha256(origin.to_persisted_string().encode()).digest()
    return _BOUND_CONTEXT + b"\0" + task_id.encode() + b"\0" + digest


class SnapshotKey:
    """The key that seals callers' snapshots at rest (from a secret of 16+ characters).

    Give the same secret to every server and worker of an app: ``TasksExtension(
    snapshot_key=...)``, or ``$REDIS_TASKS_SNAPSHOT_KEY`` for both. :attr:`key_id`
    names it without revealing it.
    """

    def __init__(self, secret: str | bytes) -> None:
        raw = secret.encode() if isinstance(secret, str) else bytes(secret)
        if len(raw) < MIN_SECRET_CHARS:
            raise ValueError(f"a snapshot key needs at least {MIN_SECRET_CHARS} characters")
        self._aead = AESGCM(_derive(raw, _CONTEXT, 32))
        self.key_id = _derive(raw, _KEY_ID_CONTEXT, _KEY_ID_BYTES)

    def seal(self, plain: bytes, task_id: str, origin: TaskOrigin) -> bytes:
        """``plain`` sealed for the task ``task_id`` running ``origin``, with a fresh nonce."""
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, plain, _bound_data(task_id, origin))
        return _BOUND + self.key_id + nonce + sealed

    def open(self, sealed: bytes, task_id: str, origin: TaskOrigin) -> bytes:
        """What :meth:`seal` sealed for this task; :class:`SnapshotError` otherwise."""
        key_id = sealed[1 : 1 + _KEY_ID_BYTES]
        if key_id != self.key_id:
            raise SnapshotError("the caller snapshot was sealed with another key", "wrong_key")
        nonce = sealed[1 + _KEY_ID_BYTES : 1 + _KEY_ID_BYTES + _NONCE_BYTES]
        body = sealed[1 + _KEY_ID_BYTES + _NONCE_BYTES :]
        try:
            return self._aead.decrypt(nonce, body, _bound_data(task_id, origin))
        except (InvalidTag, ValueError):
            raise SnapshotError(
                "the caller snapshot does not open for this task: tampered with, or moved "
                "from another task",
                "not_bound",
            ) from None

    def open_unbound(self, sealed: bytes) -> bytes:
        """A snapshot sealed before the binding (format ``S``), for ``accept_unbound``."""
        nonce, body = sealed[1 : 1 + _NONCE_BYTES], sealed[1 + _NONCE_BYTES :]
        try:
            return self._aead.decrypt(nonce, body, _CONTEXT)
        except (InvalidTag, ValueError):
            raise SnapshotError(
                "the caller snapshot was sealed with another key", "wrong_key"
            ) from None

    def __repr__(self) -> str:
        return "SnapshotKey(<secret>)"


@dataclass(frozen=True)
class CallerSnapshot:
    """Who called a task tool: the access token (``None``: anonymous), the headers, and
    the binding the task was made under (``caller``: ``None`` in a snapshot made before
    the binding)."""

    token: AccessToken | None = field(default=None, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    caller: RequestContext | None = field(default=None, repr=False)

    def encode(self, key: SnapshotKey | None, task_id: str, origin: TaskOrigin) -> bytes:
        """The payload to keep with the task ``task_id`` running ``origin`` (sealed and
        bound to both with ``key`` when there is one)."""
        caller = self.caller
        state = {
            "token": None if self.token is None else self.token.model_dump(mode="json"),
            "headers": dict(self.headers),
            "caller": None
            if caller is None
            else {"endpoint": caller.endpoint, "partitionKey": caller.partition_key},
        }
        plain = json.dumps(state, separators=(",", ":")).encode()
        return key.seal(plain, task_id, origin) if key is not None else _PLAIN + plain

    @classmethod
    def decode(
        cls,
        payload: bytes,
        key: SnapshotKey | None,
        task_id: str,
        origin: TaskOrigin,
        *,
        accept_unbound: bool = False,
    ) -> CallerSnapshot:
        """Read the payload of the task ``task_id`` (running ``origin``) back;
        :class:`SnapshotError` if it cannot be read or, under a key, is not sealed and
        bound to this task (``accept_unbound``: plain and unbound ones are read too).

        An empty payload (a task made by another extension) is an anonymous caller.
        """
        if not payload:
            return cls()
        kind = payload[:1]
        if kind in (_BOUND, _SEALED_UNBOUND) and key is None:
            raise SnapshotError(
                "the caller snapshot is sealed and this worker has no key", "missing_key"
            )
        if kind == _BOUND:
            assert key is not None
            plain = key.open(payload, task_id, origin)
        elif kind in (_PLAIN, _SEALED_UNBOUND):
            if key is not None and not accept_unbound:
                raise SnapshotError(
                    "the caller snapshot is not sealed for its task, and a key is set: "
                    "refused (accept_unbound takes those made before the key)",
                    "unbound",
                )
            plain = payload[1:] if kind == _PLAIN or key is None else key.open_unbound(payload)
        else:
            raise SnapshotError("the task's payload is not a caller snapshot", "unreadable")
        try:
            state = json.loads(plain)
            token = state["token"]
            headers = state["headers"]
            caller = state.get("caller")
            return cls(
                token=None if token is None else AccessToken.model_validate(token),
                headers={str(k): str(v) for k, v in headers.items()},
                caller=None
                if caller is None
                else RequestContext(caller["endpoint"], caller["partitionKey"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            raise SnapshotError("the caller snapshot does not parse", "unreadable") from None


def warn_without_key(who: str) -> None:
    """Say once, at a server's or worker's start, that callers are kept in clear.

    Without a key a caller's bearer token is in Redis in clear, twice per open task (the
    token and the ``authorization`` header): any reader of Redis (a backup, a replica,
    ``MONITOR``) can act as that caller until the token expires. Not refused by default:
    a first run on a laptop needs no secret, and a deployment that keeps no token (no
    auth) has nothing to seal; a production checklist names the key.
    """
    logger.warning(
        "%s has no snapshot key: callers' access tokens and headers are kept in Redis in "
        "clear with their tasks; set $REDIS_TASKS_SNAPSHOT_KEY (or snapshot_key=) on every "
        "server and worker",
        who,
        extra={"event": "snapshot_key_missing"},
    )
