"""Every request gets an id: the client's `X-Request-ID` (or `X-Correlation-ID`, FirecREST's
name) when it is well-formed, else a fresh one; echoed in the answer's `X-Request-ID` and
made known to the code serving the request (`service.operations.request_context`), so the
access log, the audit log and an operator reading both can tie them together."""

from __future__ import annotations

import re

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from iri_gateway.errors import GatewayError
from iri_gateway.service.accounts.auth import TokenFile
from iri_gateway.service.operations.request_context import accepted_request_id, serving_request

HEADER = "X-Request-ID"
ALTERNATIVE_HEADER = "X-Correlation-ID"


class RequestIds:
    """ASGI middleware: the request's id set for its duration and sent back in `HEADER`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        offered = headers.get(HEADER) or headers.get(ALTERNATIVE_HEADER)
        if offered is not None and _could_be_credential(scope, headers, offered):
            offered = None  # logged and echoed, it would give the credential away
        identifier = accepted_request_id(offered)
        scope.setdefault("state", {})["request_id"] = identifier

        async def with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = identifier
            await send(message)

        with serving_request(identifier):
            await self.app(scope, receive, with_id)


_PIECE = 8
"""The shortest request id (or credential) compared: shorter ones match by chance."""
_JWT_SHAPE = re.compile(r"[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]+")
"""A JWT: three base64url parts (its header and claims are never short)."""


def _could_be_credential(scope: Scope, headers: Headers, offered: str) -> bool:
    """True when the client's request id is or holds a credential: it holds the credential
    of its `Authorization` header, is found in that header or the query string, is shaped
    like a JWT, or is a token of the tokens file. A client that pasted its token into the
    wrong header must not have it written to the access log (`access_log`) nor echoed; it
    is given a fresh id instead."""
    authorization = headers.get("authorization", "")
    credential = authorization.split()[-1] if authorization.split() else ""
    if len(credential) >= _PIECE and credential in offered:
        return True
    if len(offered) >= _PIECE and (
        offered in authorization or offered.encode() in scope.get("query_string", b"")
    ):
        return True
    if _JWT_SHAPE.fullmatch(offered):
        return True
    app = scope.get("app")
    authenticator = getattr(getattr(app, "state", None), "authenticator", None)
    if not isinstance(authenticator, TokenFile):
        return False
    try:
        authenticator.authenticate(offered)
    except GatewayError:  # not a token (or the file unreadable: the route will say so)
        return False
    return True
