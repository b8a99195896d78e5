"""The port proxy's origin: a job's ports at `/<job>/<member>/<port>/`, `/_iri/open`, and
raw TCP tunnels at `/_iri/tunnel/<job>/<member>/<port>`.

Every request is authenticated, for one port: by the session cookie a link set
(`iri-proxy-session`, scoped to the port's path), or by the caller's own bearer token (a
script, the CLI). Then the port must be the caller's and open (`service.proxy.targets`),
a connection is made where the job's resource is reached (`PortProxy.connect`), and the
request or WebSocket is forwarded (`forward_http`, `forward_websocket`) with the caller's
credentials taken out and the job's service token put in. A tunnel (`forward_tcp`, for
`iri-gateway jobs forward`) is a WebSocket whose binary messages are the bytes of one TCP
connection to the port; it takes the bearer token only (a browser has no business there).
A connection stays open while its member runs: a shared watch looks at the store every few
seconds and cuts it (WebSocket code 1001) when the job or the member ends.

The proxy answers its own refusals as problem+json, never a page of the console, and sets
no header of the API's browser protection on what a service sends (its pages are its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from starlette.concurrency import run_in_threadpool
from starlette.types import Message, Receive, Scope, Send

from iri_gateway.api.plumbing.problems import PROBLEM, status_of
from iri_gateway.api.proxy.forward_http import forward_http
from iri_gateway.api.proxy.forward_tcp import forward_tcp
from iri_gateway.api.proxy.forward_ws import forward_websocket
from iri_gateway.api.proxy.rules import ForwardRules
from iri_gateway.errors import GatewayError
from iri_gateway.service.accounts.auth import AuthenticationError, Authenticator
from iri_gateway.service.accounts.token_policy import TokenPolicy
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.proxy.passes import PassRefusedError
from iri_gateway.service.proxy.service import PortProxy, Target

log = logging.getLogger(__name__)

SESSION_COOKIE = "iri-proxy-session"
OPEN_PATH = "/_iri/open"
PORT_PATH = re.compile(
    r"^(?P<tunnel>/_iri/tunnel)?"
    r"/(?P<job>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r"/(?P<member>[a-z][a-z0-9-]{0,63})/(?P<port>[a-z][a-z0-9_]{0,19})(?P<rest>/.*)?$"
)
WATCH_INTERVAL = 2.0
"""Seconds between two looks at the store for the ends of the jobs whose ports are open."""
TUNNEL_ONLY = (
    "a tunnel is a WebSocket whose binary messages carry one TCP connection "
    "(`iri-gateway jobs forward`); this path takes nothing else"
)
NOT_SIGNED_IN = (
    "open this port through the gateway: the console's Open link, `iri-gateway jobs open`, "
    "or POST /api/v2/compute/ports/{resource}/{job}/{member}/{port}; a script may send its "
    "gateway token as `Authorization: Bearer ...`"
)


@dataclass(frozen=True)
class PortRequest:
    """Which port a request is for, and the path after the port's prefix."""

    job_id: str
    member: str
    port: str
    rest: str | None
    tunnel: bool = False
    """A raw TCP tunnel (`/_iri/tunnel/...`), not the port's own HTTP or WebSocket."""


def port_request(path: str) -> PortRequest | None:
    found = PORT_PATH.match(path)
    if found is None or (found["tunnel"] and found["rest"] not in (None, "/")):
        return None
    return PortRequest(
        found["job"], found["member"], found["port"], found["rest"], bool(found["tunnel"])
    )


def _header(scope: Scope, name: bytes) -> list[str]:
    return [value.decode("latin-1") for key, value in scope.get("headers", ()) if key == name]


def session_cookies(scope: Scope) -> list[str]:
    """The values of every `iri-proxy-session` cookie the request carries (a browser sends
    one per matching path; only one is for this port)."""
    values: list[str] = []
    for header in _header(scope, b"cookie"):
        for pair in header.split(";"):
            name, _, value = pair.strip().partition("=")
            if name == SESSION_COOKIE and value:
                values.append(value.strip('"'))
    return values


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CROSS_SITE = (
    "a page of another origin may not change a job's service or open its WebSockets through "
    "the port proxy (its Origin is not the proxy's)"
)


def _origin_of(url: str) -> str:
    parts = urllib.parse.urlsplit(url.strip().lower())
    default = {"http": 80, "https": 443, "ws": 80, "wss": 443}.get(parts.scheme)
    port = "" if parts.port in (None, default) else f":{parts.port}"
    return f"{parts.scheme}://{parts.hostname or ''}{port}"


def cross_site(scope: Scope, proxy_url: str | None) -> bool:
    """A WebSocket or a state-changing request sent by a page of another origin. The proxy
    shows the service the job's token, which turns off a service's own cross-site checks
    (Jupyter skips its Origin and XSRF checks for token-authenticated requests), and the
    session cookie's SameSite=Lax still lets a sibling host (`evil.example.org` beside
    `jobs.example.org`) send it: so the proxy checks `Origin` itself. A request without
    `Origin` (a script, curl) is not a page's."""
    origins = _header(scope, b"origin")
    if not origins or proxy_url is None:
        return False
    unsafe = scope["type"] == "websocket" or scope.get("method", "GET") not in SAFE_METHODS
    return unsafe and any(_origin_of(o) != _origin_of(proxy_url) for o in origins)


def bearer(scope: Scope) -> str | None:
    for header in _header(scope, b"authorization"):
        scheme, _, token = header.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return None


@dataclass
class _Watched:
    ended: asyncio.Event
    users: int = 0


@dataclass
class EndWatch:
    """One look at the store every WATCH_INTERVAL for all open connections of one member,
    whatever their number: the connections of a member that ended are cut."""

    proxy: PortProxy
    _watched: dict[tuple[str, str], _Watched] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None

    @contextlib.asynccontextmanager
    async def watching(self, job_id: str, member: str) -> AsyncIterator[asyncio.Event]:
        key = (job_id, member)
        entry = self._watched.get(key)
        if entry is None:
            entry = self._watched[key] = _Watched(asyncio.Event())
        entry.users += 1
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="port-proxy-watch")
        try:
            yield entry.ended
        finally:
            entry.users -= 1
            if entry.users == 0 and self._watched.get(key) is entry:
                del self._watched[key]

    async def _run(self) -> None:
        while self._watched:
            await asyncio.sleep(WATCH_INTERVAL)
            for (job_id, member), entry in list(self._watched.items()):
                try:
                    still = await run_in_threadpool(self.proxy.still_open, job_id, member)
                except Exception:  # the store unreachable for a moment: look again later
                    log.warning("port proxy: cannot look whether %s/%s runs", job_id, member)
                    continue
                if not still:
                    entry.ended.set()


class ProxyApp:
    """ASGI: the port proxy's origin."""

    def __init__(
        self,
        engine: Engine,
        authenticator: Authenticator,
        *,
        secure: bool,
        policy: TokenPolicy,
    ) -> None:
        self.engine = engine
        self.proxy = engine.proxy
        self.authenticator = authenticator
        self.policy = policy
        """The site's token limits; a token reaching a service is one that changes (a
        service may do anything: a Jupyter kernel runs code), so a read token is refused."""
        self.secure = secure
        self.watch = EndWatch(engine.proxy)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        began = time.monotonic()
        status: int | None = None

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] in ("http.response.start", "websocket.http.response.start"):
                status = message["status"]
            elif message["type"] == "websocket.accept":
                status = 101
            await send(message)

        try:
            await self._serve(scope, receive, counted)
        finally:
            log.info(
                "port proxy %s %s -> %s in %.3f s",
                scope.get("method", "WEBSOCKET"),
                scope.get("path"),
                status,
                time.monotonic() - began,
            )

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        websocket = scope["type"] == "websocket"
        if websocket and (await receive())["type"] != "websocket.connect":
            return  # the client left before its handshake was even looked at
        path: str = scope.get("path", "")
        if path == OPEN_PATH and not websocket:
            await self._open(scope, send)
            return
        asked = port_request(path)
        if asked is None:
            await self._refuse(
                scope,
                send,
                404,
                "Not Found",
                "the port proxy serves a job's ports at /<job>/<member>/<port>/, and tunnels "
                "to them at /_iri/tunnel/<job>/<member>/<port>",
            )
            return
        if asked.tunnel and not websocket:
            await self._refuse(
                scope, send, 426, "Upgrade Required", TUNNEL_ONLY, [(b"upgrade", b"websocket")]
            )
            return
        if asked.rest is None and not websocket:
            query = scope.get("query_string", b"").decode("latin-1")
            location = f"{path}/" + (f"?{query}" if query else "")
            await _answer(send, 308, b"", [(b"location", location.encode("latin-1"))])
            return
        if not asked.tunnel and cross_site(scope, self.proxy.settings.url):
            await self._refuse(scope, send, 403, "Forbidden", CROSS_SITE)
            return
        try:
            owner = await self._caller(scope, asked)
            target = await run_in_threadpool(
                self.proxy.target, owner, asked.job_id, asked.member, asked.port
            )
            self.proxy.limits.take_connection(owner)
        except GatewayError as error:
            await self._refuse_error(scope, send, error)
            return
        try:
            await self._forward(scope, receive, send, target, asked)
        finally:
            self.proxy.limits.give_back(owner)

    async def _caller(self, scope: Scope, asked: PortRequest) -> str:
        """The user the request speaks for: its session for this port, or its token (a
        tunnel: its token only)."""
        refusal: PassRefusedError | None = None
        for value in [] if asked.tunnel else session_cookies(scope):
            try:
                return self.proxy.check_session(value, asked.job_id, asked.member, asked.port)
            except PassRefusedError as error:
                refusal = error
        token = bearer(scope)
        if token is not None:
            principal = await run_in_threadpool(self.authenticator.authenticate, token)
            client = scope.get("client")
            self.policy.check(
                principal,
                client[0] if client else None,
                time.time(),
                changes=f"reaching port {asked.port!r} of job {asked.job_id}",
            )
            return principal.user
        if refusal is not None:
            raise PassRefusedError(f"{refusal}; {NOT_SIGNED_IN}")
        raise AuthenticationError(f"no session for this port: {NOT_SIGNED_IN}")

    async def _forward(
        self, scope: Scope, receive: Receive, send: Send, target: Target, asked: PortRequest
    ) -> None:
        try:
            upstream = await run_in_threadpool(self.proxy.connect, target)
        except GatewayError as error:
            await self._refuse_error(scope, send, error)
            return
        limits, owner = self.proxy.limits, target.owner

        async def meter(size: int) -> None:
            delay = limits.delay(owner, size)
            if delay > 0:
                await asyncio.sleep(delay)

        try:
            async with self.watch.watching(target.job_id, target.member) as ended:
                rules = ForwardRules(
                    service_token=target.service_token,
                    prefix=target.prefix,
                    session_cookie=SESSION_COOKIE,
                    meter=meter,
                    ended=ended,
                    head_timeout=self.proxy.settings.connect_timeout,
                )
                if asked.tunnel:
                    subprotocols = list(scope.get("subprotocols", []))
                    await forward_tcp(subprotocols, receive, send, upstream, rules)
                elif scope["type"] == "websocket":
                    await forward_websocket(scope, receive, send, upstream, rules)
                else:
                    await forward_http(scope, receive, send, upstream, rules)
        finally:
            upstream.close()

    async def _open(self, scope: Scope, send: Send) -> None:
        """`/_iri/open?ticket=...`: the ticket exchanged for a session cookie scoped to its
        port's path, then on to the port."""
        if scope.get("method") not in ("GET", "HEAD"):
            await self._refuse(scope, send, 405, "Method Not Allowed", "open a link with GET")
            return
        query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
        tickets = query.get("ticket", [])
        if len(tickets) != 1:
            await self._refuse(
                scope, send, 400, "Bad Request", "a link carries one `ticket`; " + NOT_SIGNED_IN
            )
            return
        try:
            value, grant = await run_in_threadpool(self.proxy.open_session, tickets[0])
        except GatewayError as error:
            await self._refuse_error(scope, send, error)
            return
        path = f"/{grant.job_id}/{grant.member}/{grant.port}/"
        cookie = (
            f"{SESSION_COOKIE}={value}; Path={path}; Max-Age="
            f"{int(self.proxy.settings.session_ttl)}; HttpOnly; SameSite=Lax"
            + ("; Secure" if self.secure else "")
        )
        await _answer(
            send,
            303,
            b"",
            [
                (b"location", path.encode()),
                (b"set-cookie", cookie.encode()),
                (b"cache-control", b"no-store"),
                (b"referrer-policy", b"no-referrer"),
            ],
        )

    async def _refuse_error(self, scope: Scope, send: Send, error: GatewayError) -> None:
        status, title, headers = status_of(error)
        extra = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
        await self._refuse(scope, send, status, title, str(error), extra)

    async def _refuse(
        self,
        scope: Scope,
        send: Send,
        status: int,
        title: str,
        detail: str,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        body = json.dumps(
            {"type": "about:blank", "status": status, "title": title, "detail": detail}
        ).encode()
        extra = [
            (b"content-type", PROBLEM.encode()),
            (b"cache-control", b"no-store"),
            *(headers or []),
        ]
        if scope["type"] == "websocket":
            await _refuse_websocket(scope, send, status, body, extra)
        else:
            await _answer(send, status, body, extra)


async def _answer(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _refuse_websocket(
    scope: Scope, send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    """A WebSocket refused before its handshake: with the real status and body where the
    server offers the ASGI extension for it, else closed (the server answers 403)."""
    if "websocket.http.response" in scope.get("extensions", {}):
        await send(
            {
                "type": "websocket.http.response.start",
                "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008})
