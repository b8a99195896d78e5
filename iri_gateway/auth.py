"""Bearer tokens: who is calling, and which projects they may charge.

The embedded default is a tokens file (JSON) in the data directory, created on the first
`serve` with one admin token printed once. Only SHA-256 digests of tokens are stored, so the
file does not hold usable secrets.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from iri_gateway.errors import GatewayError


class AuthenticationError(GatewayError):
    """No token, or a token the gateway does not know."""

    code = "unauthenticated"


@dataclass(frozen=True)
class Principal:
    """The authenticated caller."""

    user: str
    projects: tuple[str, ...] = ()


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenFile:
    """Tokens by digest: `{"tokens": {sha256: {"user": ..., "projects": [...]}}}`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: dict[str, Principal] = {}
        self.reload()

    def reload(self) -> None:
        if not self.path.exists():
            self._entries = {}
            return
        document = json.loads(self.path.read_text())
        self._entries = {
            digest: Principal(entry["user"], tuple(entry.get("projects", [])))
            for digest, entry in document.get("tokens", {}).items()
        }

    def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise AuthenticationError("a bearer token is required")
        principal = self._entries.get(_digest(token))
        if principal is None:
            raise AuthenticationError("the bearer token is not valid")
        return principal

    def issue(self, user: str, projects: list[str] | None = None) -> str:
        """Create a token for `user`, store its digest, and return the token (shown once)."""
        token = secrets.token_urlsafe(32)
        document = json.loads(self.path.read_text()) if self.path.exists() else {"tokens": {}}
        document["tokens"][_digest(token)] = {"user": user, "projects": projects or []}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(document, indent=2))
        os.chmod(temporary, 0o600)
        temporary.replace(self.path)
        self.reload()
        return token

    def __len__(self) -> int:
        return len(self._entries)
