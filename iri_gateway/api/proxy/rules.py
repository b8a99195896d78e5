"""What forwarding to a job's port changes, and by what it is bounded (`ForwardRules`), and the
headers it sends on and back (pure functions, each rule tested on its own).

Going to the service: the user's `Authorization` (their gateway token) is replaced by the
job's own token (`Authorization: token <IRI_SERVICE_TOKEN>`); the proxy's session cookie and
the console's (`sign_in.cookies`) are taken out of `Cookie` (the service's own cookies stay);
hop-by-hop headers and those the request's `Connection` names stay here;
`X-Forwarded-For/-Proto/-Host/-Prefix` are set (any the client sent are dropped: they would
be believed); `Host` is kept as the browser sent it, as a reverse proxy keeps it, so that a
service's own origin check (Jupyter's on WebSockets) sees its public host. Coming back:
hop-by-hop headers are dropped, and so is a `Set-Cookie` of the proxy's or the console's
cookies (a service may not set the gateway's sessions).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from iri_gateway.api.sign_in.cookies import CONSOLE_COOKIES

Headers = list[tuple[bytes, bytes]]

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
REPLACED = frozenset(
    {
        b"authorization",
        b"forwarded",
        b"x-forwarded-for",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"x-forwarded-prefix",
        b"expect",  # the server in front answered any `100-continue` already
    }
)
WEBSOCKET_OWN = frozenset(
    {
        b"host",
        b"sec-websocket-key",
        b"sec-websocket-version",
        b"sec-websocket-extensions",
        b"sec-websocket-protocol",
    }
)
"""Headers the upstream handshake writes itself (wsproto: host, key, version; the
subprotocols asked for are passed on as such; no extension is offered upstream)."""


@dataclass(frozen=True)
class ForwardRules:
    """One forwarded connection: what the service is shown, and what bounds it."""

    service_token: str
    """The job's own token, shown to the service as `Authorization: token ...`."""
    prefix: str
    """`/<job>/<member>/<port>`: the port's path on the proxy (`X-Forwarded-Prefix`)."""
    meter: Callable[[int], Awaitable[None]]
    """Called with the size of every chunk or message, either way, before it is passed on;
    it may sleep (the user's byte rate)."""
    ended: asyncio.Event
    """Set when the job or member ends: the connection is cut (a WebSocket closed 1001)."""
    head_timeout: float
    """Seconds to wait for the service's answer head (504) or handshake."""
    session_cookie: str = "iri-proxy-session"
    max_head_bytes: int = 64 * 1024
    """Largest answer head taken from a service (502 past it)."""


def _connection_listed(headers: Iterable[tuple[bytes, bytes]]) -> set[bytes]:
    """The header names a `Connection` header lists (hop-by-hop for this one connection)."""
    return {
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.split(b",")
        if token.strip()
    }


def _gateways(session_cookie: str) -> frozenset[bytes]:
    """The cookies that are the gateway's, never a service's: the proxy's session and the
    console's (a browser sends a host's cookies to every port of it, so a proxy on another
    port of the console's host would otherwise hand the console's session to the service)."""
    return frozenset({session_cookie.encode(), *(n.encode() for n in CONSOLE_COOKIES)})


def without_session(cookie: bytes, session_cookie: str) -> bytes:
    """A `Cookie` header's pairs without the gateway's own cookies (b"" when none is left)."""
    names = _gateways(session_cookie)
    kept = [
        pair.strip()
        for pair in cookie.split(b";")
        if pair.strip() and pair.strip().split(b"=", 1)[0].strip() not in names
    ]
    return b"; ".join(kept)


def request_headers(
    headers: Iterable[tuple[bytes, bytes]],
    rules: ForwardRules,
    *,
    client: str | None,
    scheme: str,
    websocket: bool = False,
) -> Headers:
    """The headers sent to the service for a request that came with `headers`."""
    headers = list(headers)
    listed = _connection_listed(headers)
    host = b""
    sent: Headers = []
    for raw_name, value in headers:
        name = raw_name.lower()
        if name == b"host":
            host = value
        if name in HOP_BY_HOP or name in listed or name in REPLACED:
            continue
        if websocket and name in WEBSOCKET_OWN:
            continue
        if name == b"cookie":
            value = without_session(value, rules.session_cookie)
            if not value:
                continue
        sent.append((name, value))
    sent.append((b"authorization", f"token {rules.service_token}".encode()))
    if client:
        sent.append((b"x-forwarded-for", client.encode()))
    sent.append((b"x-forwarded-proto", b"https" if scheme in ("https", "wss") else b"http"))
    if host:
        sent.append((b"x-forwarded-host", host))
    sent.append((b"x-forwarded-prefix", rules.prefix.encode()))
    return sent


def response_headers(headers: Iterable[tuple[bytes, bytes]], session_cookie: str) -> Headers:
    """The headers of a service's answer as the client gets them."""
    headers = list(headers)
    listed = _connection_listed(headers)
    ours = _gateways(session_cookie)
    kept: Headers = []
    for raw_name, value in headers:
        name = raw_name.lower()
        if name in HOP_BY_HOP or name in listed:
            continue
        if name == b"set-cookie" and value.split(b"=", 1)[0].strip() in ours:
            continue
        kept.append((name, value))
    return kept
