"""Is a JWT still active? Its identity provider's word (OAuth 2.0 Token Introspection,
RFC 7662), asked before a JWT is accepted when the site sets an introspection endpoint.

A JWT's signature and `exp` say nothing of a token revoked since it was issued; the IRI
reference implementation's AmSC sign-in asks the provider and refuses the token when it
cannot get an answer (fail-closed). So here: `active: true` accepts, anything else from
the provider refuses (401), and no answer (a fault, a time-out, a reply that is not RFC
7662's) is `IntrospectionUnavailableError` (503, retry): never an acceptance. An active
answer is remembered for `cache_seconds` (by the token's SHA-256, bounded), so a revocation
takes effect within that time and a busy client costs one call per that time, not one per
request.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import httpx

from iri_gateway.errors import GatewayError
from iri_gateway.service.accounts.provider_answers import (
    AnswerTooLargeError,
    bounded_answer,
    json_object,
)

CACHED_TOKENS = 10_000
"""Active answers remembered at most (least recently used first out)."""
CACHED_ANSWER_BYTES = 8 * 1024
"""An answer larger than this (as JSON) is not remembered: at most 80 MB for the cache."""
ANSWER_LIMIT = 64 * 1024
"""Bytes of the provider's answer read at most."""


class IntrospectionUnavailableError(GatewayError):
    """The identity provider did not say whether the token is active (503, retry)."""

    code = "introspection_unavailable"
    retry_after = 5


class Introspection:
    """Asks `url` about tokens as the client `client_id` (HTTP Basic, RFC 7662 section 2.1)."""

    def __init__(
        self,
        url: str,
        *,
        client_id: str,
        client_secret: str,
        cache_seconds: float = 30.0,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self._auth = (client_id, client_secret)
        self._cache_seconds = cache_seconds
        self._timeout = timeout
        self._clock = clock
        self._active: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()

    def active(self, token: str) -> bool:
        """True when the provider says the token is active (or said so less than
        `cache_seconds` ago); IntrospectionUnavailableError when it does not say."""
        return self.answer(token) is not None

    def answer(self, token: str) -> dict[str, Any] | None:
        """The provider's answer for an active token (its claims: RFC 7662's `sub`, `aud`,
        `exp`, `scope`, ... and whatever the provider adds), the same one for
        `cache_seconds`; None when it says the token is not active;
        IntrospectionUnavailableError when it does not say."""
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self._clock()
        with self._lock:
            kept = self._active.get(key)
            if kept is not None and now < kept[0]:
                self._active.move_to_end(key)
                return kept[1]
            self._active.pop(key, None)
        document = self._ask(token)
        if not document["active"]:
            return None
        if len(json.dumps(document)) > CACHED_ANSWER_BYTES:
            return document  # asked again next time: the cache's memory stays bounded
        with self._lock:
            self._active[key] = (now + self._cache_seconds, document)
            while len(self._active) > CACHED_TOKENS:
                self._active.popitem(last=False)
        return document

    def _ask(self, token: str) -> dict[str, Any]:
        try:
            status, body = bounded_answer(
                "POST",
                self.url,
                timeout=self._timeout,
                limit=ANSWER_LIMIT,
                form={"token": token, "token_type_hint": "access_token"},
                auth=self._auth,
            )
        except AnswerTooLargeError:
            raise IntrospectionUnavailableError(
                "the identity provider's introspection answer is too large; "
                "the token is refused until it answers (try again shortly)"
            ) from None
        except httpx.HTTPError as error:
            raise IntrospectionUnavailableError(
                f"cannot ask the identity provider whether the token is still valid "
                f"({type(error).__name__}); the token is refused until it answers (try "
                "again shortly)"
            ) from None
        if status != 200:
            raise IntrospectionUnavailableError(
                f"the identity provider's introspection endpoint answered HTTP {status}; the "
                "token is refused until it answers (try again shortly)"
            )
        document = json_object(body)
        if document is None or not isinstance(document.get("active"), bool):
            raise IntrospectionUnavailableError(
                "the identity provider's introspection answer is not RFC 7662's (no boolean "
                "`active`); the token is refused until it answers (try again shortly)"
            )
        return document
