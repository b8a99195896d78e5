"""The console's OpenID Connect sign-in, as the relying party: the authorization code flow
with PKCE (RFC 7636), the provider found by its discovery document.

The gateway, not the browser, is the OpenID client (a confidential client with a secret, or
a public one with PKCE alone): the browser only carries the authorization code back, and the
tokens never reach it. `begin` makes a sign-in attempt (state, nonce and PKCE verifier, all
random) and the provider's address to send the browser to; `finish` exchanges the code the
provider sent back for tokens and checks the ID token (signature by the provider's JWKS,
issuer, audience = our client id, the attempt's nonce, expiry). The access token it brings is
then the caller's credential, checked by the REST API's own authenticator at every use: the
console and the API know one identity.

Written here rather than taken from a library: what is needed is two HTTP calls and a JWT
check (PyJWT, already the API's), and the OpenID client libraries for Python (Authlib,
oic) tie themselves to a web framework's sessions, which the gateway keeps in its store.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx
import jwt

from iri_gateway.errors import GatewayError
from iri_gateway.service.accounts.provider_answers import (
    AnswerTooLargeError,
    bounded_answer,
    json_object,
)

DISCOVERY_TTL = 3600.0
"""Seconds the provider's discovery document is kept before it is fetched again."""
ANSWER_LIMIT = 256 * 1024
"""Bytes of a provider's answer read at most."""
ATTEMPT_SECONDS = 600.0
"""How long a sign-in attempt may take at the provider (the user typing a password)."""
ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "PS256", "PS384", "PS512")


class SignInError(GatewayError):
    """The sign-in failed for a reason the user can act on (the provider refused, the
    attempt is unknown or old): the message says what happened, in the provider's words
    when it gave some."""

    code = "sign_in_failed"


class ProviderUnavailableError(GatewayError):
    """The identity provider could not be reached or answered out of protocol (503)."""

    code = "identity_provider_unavailable"
    retry_after = 10


@dataclass(frozen=True)
class ProviderMetadata:
    """What the discovery document says of the endpoints the sign-in uses."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    end_session_endpoint: str | None


@dataclass(frozen=True)
class Attempt:
    """One sign-in under way: what the callback needs to finish it, kept by the gateway
    (never by the browser) under the state's digest."""

    state: str
    nonce: str
    verifier: str
    next_page: str
    expires: float


@dataclass(frozen=True)
class SignedIn:
    """A finished sign-in: the access token the REST API accepts, when that ends, and the
    ID token (a hint for the provider's sign-out)."""

    access_token: str
    expires: float | None
    id_token: str


class OpenIdSignIn:
    """The sign-in with one provider (`issuer`) as one client."""

    def __init__(
        self,
        *,
        issuer: str,
        client_id: str,
        client_secret: str | None,
        redirect_uri: str,
        scopes: str,
        resource: str | None = None,
        timeout: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`resource`: the RFC 8707 resource indicator asked for (the API's audience), for a
        provider that issues access tokens per resource; None asks for none."""
        self.issuer = issuer.rstrip("/")
        self.client_id, self._secret = client_id, client_secret
        self.redirect_uri, self.scopes, self.resource = redirect_uri, scopes, resource
        self._timeout, self._clock = timeout, clock
        self._metadata: tuple[float, ProviderMetadata] | None = None
        self._keys: jwt.PyJWKClient | None = None
        self._lock = threading.Lock()

    def metadata(self) -> ProviderMetadata:
        """The provider's endpoints, from its discovery document (kept `DISCOVERY_TTL`)."""
        with self._lock:
            if self._metadata is not None and self._clock() < self._metadata[0]:
                return self._metadata[1]
        address = f"{self.issuer}/.well-known/openid-configuration"
        document = self._json("GET", address, "discovery document")
        try:
            metadata = ProviderMetadata(
                issuer=_text(document, "issuer"),
                authorization_endpoint=_text(document, "authorization_endpoint"),
                token_endpoint=_text(document, "token_endpoint"),
                jwks_uri=_text(document, "jwks_uri"),
                end_session_endpoint=document.get("end_session_endpoint")
                if isinstance(document.get("end_session_endpoint"), str)
                else None,
            )
        except KeyError as missing:
            raise ProviderUnavailableError(
                f"the identity provider's discovery document ({address}) has no {missing}"
            ) from None
        if metadata.issuer.rstrip("/") != self.issuer:
            raise ProviderUnavailableError(
                f"the discovery document at {address} names the issuer {metadata.issuer!r}, "
                f"not {self.issuer!r} (OpenID Connect Discovery 1.0, section 4.3)"
            )
        with self._lock:
            self._metadata = (self._clock() + DISCOVERY_TTL, metadata)
            if self._keys is None or self._keys.uri != metadata.jwks_uri:
                self._keys = jwt.PyJWKClient(metadata.jwks_uri, cache_keys=True, lifespan=300)
        return metadata

    def begin(self, next_page: str) -> tuple[str, Attempt]:
        """A new attempt, and the provider's address to send the browser to."""
        metadata = self.metadata()
        attempt = Attempt(
            state=secrets.token_urlsafe(32),
            nonce=secrets.token_urlsafe(32),
            verifier=secrets.token_urlsafe(48),
            next_page=next_page,
            expires=self._clock() + ATTEMPT_SECONDS,
        )
        challenge = base64.urlsafe_b64encode(hashlib.sha256(attempt.verifier.encode()).digest())
        query = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": self.redirect_uri,
            "scope": self.scopes,
            "state": attempt.state,
            "nonce": attempt.nonce,
            "code_challenge": challenge.rstrip(b"=").decode(),
            "code_challenge_method": "S256",
        }
        if self.resource is not None:
            query["resource"] = self.resource
        separator = "&" if "?" in metadata.authorization_endpoint else "?"
        return f"{metadata.authorization_endpoint}{separator}{urlencode(query)}", attempt

    def finish(self, attempt: Attempt, code: str, issuer: str | None) -> SignedIn:
        """Exchange `code` (sent back for `attempt`; `issuer`: the callback's `iss`, RFC
        9207, when the provider sends one) for tokens, and check the ID token."""
        if attempt.expires <= self._clock():
            raise SignInError("the sign-in took too long (over 10 minutes); sign in again")
        metadata = self.metadata()
        if issuer is not None and issuer.rstrip("/") != self.issuer:
            raise SignInError(
                f"the answer came from the issuer {issuer!r}, not {self.issuer!r}; sign in again"
            )
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect_uri,
            "code_verifier": attempt.verifier,
        }
        auth: tuple[str, str] | None = None
        if self._secret is None:
            form["client_id"] = self.client_id
        else:
            auth = (self.client_id, self._secret)
        tokens = self._json("POST", metadata.token_endpoint, "token endpoint", form, auth)
        access, id_token = tokens.get("access_token"), tokens.get("id_token")
        if not isinstance(access, str) or not isinstance(id_token, str):
            raise ProviderUnavailableError(
                "the identity provider's token endpoint answered without an access token "
                "and an ID token"
            )
        self._check_id_token(id_token, attempt)
        lifetime = tokens.get("expires_in")
        expires = (
            self._clock() + lifetime
            if isinstance(lifetime, int | float) and not isinstance(lifetime, bool)
            else None
        )
        return SignedIn(access, expires, id_token)

    def sign_out_address(self, id_token: str | None, return_to: str) -> str | None:
        """The provider's sign-out page (RP-initiated logout), coming back to `return_to`;
        None when the provider offers none or cannot be asked now."""
        try:
            endpoint = self.metadata().end_session_endpoint
        except ProviderUnavailableError:
            return None
        if endpoint is None:
            return None
        query = {"client_id": self.client_id, "post_logout_redirect_uri": return_to}
        if id_token:
            query["id_token_hint"] = id_token
        separator = "&" if "?" in endpoint else "?"
        return f"{endpoint}{separator}{urlencode(query)}"

    def _check_id_token(self, id_token: str, attempt: Attempt) -> None:
        keys = self._keys
        assert keys is not None  # made with the metadata
        try:
            key = keys.get_signing_key_from_jwt(id_token)
            claims: dict[str, Any] = jwt.decode(
                id_token,
                key.key,
                algorithms=list(ALGORITHMS),
                audience=self.client_id,
                issuer=self.metadata().issuer,
                leeway=30,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.PyJWKClientConnectionError as error:
            raise ProviderUnavailableError(
                f"cannot fetch the identity provider's keys: {error}"
            ) from None
        except jwt.PyJWTError as error:
            raise SignInError(f"the identity provider's ID token is not valid: {error}") from None
        if not secrets.compare_digest(str(claims.get("nonce", "")), attempt.nonce):
            raise SignInError(
                "the ID token was not made for this sign-in (its nonce differs); sign in again"
            )

    def _json(
        self,
        method: str,
        url: str,
        what: str,
        form: dict[str, str] | None = None,
        auth: tuple[str, str] | None = None,
    ) -> dict[str, Any]:
        """The provider's JSON answer at `url` (an object), read up to `ANSWER_LIMIT`.
        An OAuth error answer (400/401 with `error`) is a SignInError in its words."""
        try:
            status, body = bounded_answer(
                method, url, timeout=self._timeout, limit=ANSWER_LIMIT, form=form, auth=auth
            )
        except AnswerTooLargeError:
            raise ProviderUnavailableError(
                f"the identity provider's {what} is larger than {ANSWER_LIMIT // 1024} KiB"
            ) from None
        except httpx.HTTPError as error:
            raise ProviderUnavailableError(
                f"cannot reach the identity provider's {what} ({type(error).__name__}: "
                f"{error}); try again shortly"
            ) from None
        document = json_object(body)
        if status in (400, 401) and document is not None and "error" in document:
            words = ": ".join(
                str(document[k])[:300] for k in ("error", "error_description") if k in document
            )
            raise SignInError(f"the identity provider refused the sign-in ({words})")
        if status != 200 or document is None:
            raise ProviderUnavailableError(
                f"the identity provider's {what} answered HTTP {status}"
                + ("" if document is not None else ", not a JSON object")
            )
        return document


def _text(document: dict[str, Any], name: str) -> str:
    value = document.get(name)
    if not isinstance(value, str) or not value:
        raise KeyError(name)
    return value
