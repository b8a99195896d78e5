"""Access tokens only their identity provider can read (opaque), checked by asking it: OAuth
2.0 Token Introspection (RFC 7662) with `auth = "introspection"`.

Some providers issue opaque access tokens (Globus Auth's; any OAuth server configured so),
and for them introspection is the only check there is. The provider's answer is held to the
same rules as a JWT's claims: active, issued by the configured issuer (when the answer names
one), meant for this gateway (`aud` holds its audience; alone with an exact audience), not
expired (with the leeway), and the caller made by the site's `ClaimRules` from the answer
(RFC 7662's `sub`, `scope`, `exp`, `iat`, and whatever the provider adds, such as projects).
A revoked token is refused once the cached answer (`cache_seconds`) has run out; no answer
from the provider refuses the token (503, fail-closed), as for JWTs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from iri_gateway.service.accounts.auth import (
    AuthenticationError,
    ClaimRules,
    Principal,
    audience_refusal,
)
from iri_gateway.service.accounts.introspection import Introspection


class IntrospectedTokenVerifier:
    """Bearer tokens accepted when `introspection` says they are active and for us."""

    def __init__(
        self,
        *,
        introspection: Introspection,
        issuer: str,
        audience: str,
        rules: ClaimRules | None = None,
        exact_audience: bool = False,
        leeway: float = 0.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.introspection = introspection
        self.issuer, self.audience = issuer, audience
        self.rules = rules or ClaimRules()
        self.exact_audience, self.leeway = exact_audience, leeway
        self._clock = clock

    may_block = True
    """Asking the provider is a network call: not on the event loop."""

    def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise AuthenticationError("a bearer token is required")
        answer = self.introspection.answer(token)
        if answer is None:
            raise AuthenticationError(
                "the identity provider says the bearer token is not active (unknown, "
                "revoked, or ended); sign in again"
            )
        issuer = answer.get("iss")
        if issuer is not None and str(issuer).rstrip("/") != self.issuer.rstrip("/"):
            raise AuthenticationError(
                f"the bearer token was issued by {issuer!r}, not by this gateway's identity "
                f"provider {self.issuer!r}"
            )
        audience = answer.get("aud")
        audiences = (
            audience if isinstance(audience, list) else [] if audience is None else [audience]
        )
        refused = audience_refusal(audiences, self.audience, exact=self.exact_audience)
        if refused is not None:
            raise AuthenticationError(refused)
        expires = answer.get("exp")
        if isinstance(expires, bool) or not isinstance(expires, int | float):
            raise AuthenticationError(
                "the identity provider's answer gives the bearer token no end (`exp`); this "
                "gateway accepts only tokens that end"
            )
        if expires + self.leeway <= self._clock():
            raise AuthenticationError("the bearer token has expired; sign in again")
        return self.rules.principal(answer)
