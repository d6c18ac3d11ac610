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

Bytes, first byte the format: ``P`` then the JSON text, or ``S`` then the 12-byte
nonce and the sealed JSON. A worker without the key refuses a sealed snapshot (the
task fails, it never runs as nobody); a worker with one reads a plain one too (a
server that had no key yet).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from fastmcp.server.auth import AccessToken

__all__ = ["CallerSnapshot", "SnapshotError", "SnapshotKey"]

_PLAIN: Final = b"P"
_SEALED: Final = b"S"
_NONCE_BYTES: Final = 12
#: Binds a sealed snapshot to this use of the key.
_CONTEXT: Final = b"redis-tasks fastmcp caller snapshot v1"
#: A secret shorter than this is refused: it would be guessable from the ciphertext.
MIN_SECRET_CHARS: Final = 16


class SnapshotError(ValueError):
    """A task's caller snapshot cannot be read: sealed without a key, sealed with another
    key, or not a snapshot (the message names which, never the content)."""


class SnapshotKey:
    """The key that seals callers' snapshots at rest (from a secret of 16+ characters).

    Give the same secret to every server and worker of an app: ``TasksExtension(
    snapshot_key=...)``, or ``$REDIS_TASKS_SNAPSHOT_KEY`` for both.
    """

    def __init__(self, secret: str | bytes) -> None:
        raw = secret.encode() if isinstance(secret, str) else bytes(secret)
        if len(raw) < MIN_SECRET_CHARS:
            raise ValueError(f"a snapshot key needs at least {MIN_SECRET_CHARS} characters")
        derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_CONTEXT).derive(raw)
        self._aead = AESGCM(derived)

    def seal(self, plain: bytes) -> bytes:
        """``plain`` sealed, with a fresh nonce."""
        nonce = os.urandom(_NONCE_BYTES)
        return _SEALED + nonce + self._aead.encrypt(nonce, plain, _CONTEXT)

    def open(self, sealed: bytes) -> bytes:
        """What :meth:`seal` sealed; :class:`SnapshotError` if another key sealed it."""
        from cryptography.exceptions import InvalidTag

        nonce, body = sealed[1 : 1 + _NONCE_BYTES], sealed[1 + _NONCE_BYTES :]
        try:
            return self._aead.decrypt(nonce, body, _CONTEXT)
        except (InvalidTag, ValueError):
            raise SnapshotError("the caller snapshot was sealed with another key") from None

    def __repr__(self) -> str:
        return "SnapshotKey(<secret>)"


@dataclass(frozen=True)
class CallerSnapshot:
    """Who called a task tool: the access token (``None``: anonymous) and the headers."""

    token: AccessToken | None = field(default=None, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)

    def encode(self, key: SnapshotKey | None) -> bytes:
        """The payload to keep with the task (sealed with ``key`` when there is one)."""
        state = {
            "token": None if self.token is None else self.token.model_dump(mode="json"),
            "headers": dict(self.headers),
        }
        plain = json.dumps(state, separators=(",", ":")).encode()
        return key.seal(plain) if key is not None else _PLAIN + plain

    @classmethod
    def decode(cls, payload: bytes, key: SnapshotKey | None) -> CallerSnapshot:
        """Read a task's payload back; :class:`SnapshotError` if it cannot be read.

        An empty payload (a task made by another extension) is an anonymous caller.
        """
        if not payload:
            return cls()
        kind = payload[:1]
        if kind == _SEALED:
            if key is None:
                raise SnapshotError("the caller snapshot is sealed and this worker has no key")
            plain = key.open(payload)
        elif kind == _PLAIN:
            plain = payload[1:]
        else:
            raise SnapshotError("the task's payload is not a caller snapshot")
        try:
            state = json.loads(plain)
            token = state["token"]
            headers = state["headers"]
            return cls(
                token=None if token is None else AccessToken.model_validate(token),
                headers={str(k): str(v) for k, v in headers.items()},
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            raise SnapshotError("the caller snapshot does not parse") from None
