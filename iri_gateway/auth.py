"""Bearer tokens: who is calling, and which projects they may charge.

The embedded default is a tokens file (JSON) in the data directory, created on the first
`serve` with one admin token printed once. Only SHA-256 digests of tokens are stored, so the
file does not hold usable secrets. In production, `JwtVerifier` checks JWTs against the
identity provider's JWKS URL instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

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


class Authenticator(Protocol):
    """Turns a bearer token into a principal, or raises AuthenticationError."""

    def authenticate(self, token: str | None) -> Principal:
        """The caller behind `token`."""


class JwtVerifier:
    """Production auth: JWTs signed by the site's identity provider, keys from its JWKS URL.

    The signature (RS/ES/PS algorithms only, never `none` or HMAC), expiry, issuer and
    audience are checked; the user name comes from a configurable claim and the projects
    from another (a list, or a space/comma separated string). Keys are cached by PyJWT's
    JWKS client and refetched when an unknown key id appears.
    """

    ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "PS256", "PS384", "PS512")

    def __init__(self, *, jwks_url: str, issuer: str, audience: str,
                 username_claim: str = "sub", projects_claim: str = "projects") -> None:
        import jwt

        self._jwt = jwt
        self._keys = jwt.PyJWKClient(jwks_url, cache_keys=True, lifespan=300)
        self.issuer, self.audience = issuer, audience
        self.username_claim, self.projects_claim = username_claim, projects_claim

    def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise AuthenticationError("a bearer token is required")
        jwt = self._jwt
        try:
            key = self._keys.get_signing_key_from_jwt(token)
            claims = jwt.decode(
                token, key.key, algorithms=list(self.ALGORITHMS), audience=self.audience,
                issuer=self.issuer, options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWKClientConnectionError as error:
            raise AuthenticationError(f"cannot fetch the identity provider's keys: {error}"
                                      ) from None
        except jwt.PyJWTError as error:
            raise AuthenticationError(f"the bearer token is not valid: {error}") from None
        user = claims.get(self.username_claim)
        if not isinstance(user, str) or not user:
            raise AuthenticationError(f"the token has no {self.username_claim!r} claim")
        projects = claims.get(self.projects_claim, [])
        if isinstance(projects, str):
            projects = [p for p in projects.replace(",", " ").split() if p]
        if not isinstance(projects, list):
            projects = []
        return Principal(user, tuple(str(p) for p in projects))
