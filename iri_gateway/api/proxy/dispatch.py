"""Requests for the port proxy's origin go to the proxy, everything else to the API.

The proxy serves users' own programs (a notebook, a dashboard): their pages run scripts, so
they must never share an origin with the console, whose pages hold a user's gateway token.
The operator gives the proxy a host name of its own (`proxy_url`), and this outermost layer
sends every request whose `Host` is that host (and port) to the proxy, before any of the
API's middleware or routes see it; no API route or console page is ever served there.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

DEFAULT_PORTS = {"http": 80, "https": 443}


def proxy_hosts(proxy_url: str) -> frozenset[bytes]:
    """The `Host` header values that name the proxy's origin: `host:port`, and `host` alone
    when the port is the scheme's default."""
    parts = urlsplit(proxy_url)
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address, as a Host header writes it
    port = parts.port or DEFAULT_PORTS[parts.scheme]
    names = {f"{host}:{port}"}
    if port == DEFAULT_PORTS[parts.scheme]:
        names.add(host)
    return frozenset(name.encode() for name in names)


def host_of(scope: Scope) -> bytes:
    for name, value in scope.get("headers", ()):
        if name == b"host":
            return bytes(value).lower()
    return b""


class ProxyByHost:
    """ASGI: the proxy for its own host, the API for every other."""

    def __init__(self, app: ASGIApp, *, proxy: ASGIApp, proxy_url: str) -> None:
        self.app = app
        self.proxy = proxy
        self.hosts = proxy_hosts(proxy_url)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and host_of(scope) in self.hosts:
            await self.proxy(scope, receive, send)
        else:
            await self.app(scope, receive, send)
