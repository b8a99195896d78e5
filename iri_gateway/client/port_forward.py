"""A local TCP port forwarded to a job's service port through the gateway (`jobs forward`).

`PortForward` listens on this machine (127.0.0.1 by default) and gives each connection it
accepts a tunnel of its own: a WebSocket to the gateway's port proxy
(`/_iri/tunnel/<job>/<member>/<port>`, authenticated with the caller's bearer token) whose
binary messages carry the connection's bytes both ways. So a database, an SSH server or a
kernel's ports in a job are reached from a laptop as if they listened here, with nothing
open on the compute nodes but the job's own port, and only for the job's owner.

wsproto (a maintained, sans-I/O WebSocket implementation, already the proxy's) does the
protocol; this module only moves bytes between two sockets, one thread per direction, so it
runs beside any program, async or not. The local side ending its connection (or half-closing
it) ends the tunnel; the service or the gateway ending it (the job ended: close code 1001)
ends the local connection. A tunnel the gateway refuses (the job not running yet: 409;
ended: 410; not yours: 404) is reported to `on_error` with the gateway's own words, and the
local connection is closed.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
from collections.abc import Callable
from types import TracebackType
from urllib.parse import urlsplit

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

from iri_gateway.client.errors import ConnectionFailed, GatewayClientError, error_class

CHUNK = 65536
SUBPROTOCOL = "iri-tunnel"
REFUSAL_LIMIT = 64 * 1024
"""Most bytes of a refusal's body read (its problem+json); the rest is not waited for."""


def _refusal(status: int, body: bytes) -> GatewayClientError:
    """The gateway's refusal of a tunnel, as the SDK's exception for its status."""
    kind = error_class(status)
    try:
        problem = json.loads(body)
    except ValueError:
        problem = None
    if isinstance(problem, dict):
        return kind(
            status, str(problem.get("title") or "Refused"), str(problem.get("detail") or "")
        )
    return kind(status, "Refused", body.decode("utf-8", "replace").strip()[:500])


def _nodelay(sock: socket.socket) -> None:
    """Bytes go on as they come: with Nagle's algorithm a small write on a kept-alive
    stream waits for the peer's delayed ACK (40 ms on Linux), which a relay in the middle
    turns into 40 ms per request."""
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Tunnel:
    """One WebSocket tunnel to a port: open it, then `relay` a local connection over it."""

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        timeout: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("ws", "wss") or not parts.hostname:
            raise ValueError(f"a tunnel's URL is ws:// or wss://, not {url!r}")
        port = parts.port or (443 if parts.scheme == "wss" else 80)
        try:
            raw = socket.create_connection((parts.hostname, port), timeout=timeout)
        except OSError as error:
            raise ConnectionFailed(0, "No answer from the port proxy", f"{url}: {error}") from None
        _nodelay(raw)
        if parts.scheme == "wss":
            context = ssl_context or ssl.create_default_context()
            raw = context.wrap_socket(raw, server_hostname=parts.hostname)
        self.sock = raw
        self.ws = WSConnection(ConnectionType.CLIENT)
        self._lock = threading.Lock()
        headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
        host = parts.netloc.rpartition("@")[2]
        try:
            self._handshake(host, parts.path or "/", headers)
        except BaseException:
            self.sock.close()
            raise
        self.sock.settimeout(None)

    def _handshake(self, host: str, target: str, headers: list[tuple[bytes, bytes]]) -> None:
        self.sock.sendall(
            self.ws.send(
                Request(host=host, target=target, extra_headers=headers, subprotocols=[SUBPROTOCOL])
            )
        )
        status, body = 0, b""
        while True:
            try:
                data = self.sock.recv(CHUNK)
            except OSError as error:
                raise ConnectionFailed(0, "The port proxy did not answer", str(error)) from None
            self.ws.receive_data(data or None)
            for event in self.ws.events():
                if isinstance(event, AcceptConnection):
                    return
                if isinstance(event, RejectConnection):
                    status = event.status_code
                    if not event.has_body:
                        raise _refusal(status, body)
                elif isinstance(event, RejectData):
                    body += event.data
                    if event.body_finished or len(body) > REFUSAL_LIMIT:
                        raise _refusal(status, body)
            if not data:
                raise _refusal(status or 502, body or b"the port proxy closed the connection")

    def _send(self, event: object) -> None:
        with self._lock:
            if self.ws.state is not ConnectionState.OPEN and not isinstance(event, CloseConnection):
                return
            data = self.ws.send(event)  # type: ignore[arg-type]
        self.sock.sendall(data)

    def relay(self, local: socket.socket) -> None:
        """Carry `local`'s bytes both ways until either end closes; then close both."""
        _nodelay(local)
        upstream = threading.Thread(target=self._upstream, args=(local,), daemon=True)
        upstream.start()
        try:
            self._downstream(local)
        finally:
            with contextlib.suppress(OSError):
                local.shutdown(socket.SHUT_RDWR)
            upstream.join(timeout=5)
            local.close()
            self.close()

    def _upstream(self, local: socket.socket) -> None:
        try:
            while True:
                data = local.recv(CHUNK)
                if not data:
                    break
                self._send(BytesMessage(data=data))
        except OSError:
            pass
        with contextlib.suppress(Exception):
            self._send(CloseConnection(code=1000, reason="the local connection closed"))

    def _downstream(self, local: socket.socket) -> None:
        while True:
            try:
                data = self.sock.recv(CHUNK)
            except OSError:
                return
            with self._lock:
                self.ws.receive_data(data or None)
                events = list(self.ws.events())
            for event in events:
                if isinstance(event, BytesMessage):
                    try:
                        local.sendall(event.data)
                    except OSError:
                        return
                elif isinstance(event, TextMessage):
                    return  # not a tunnel's: end it rather than guess what it means
                elif isinstance(event, Ping):
                    with contextlib.suppress(OSError):
                        self._send(event.response())
                elif isinstance(event, CloseConnection):
                    with contextlib.suppress(Exception):
                        self._send(event.response())
                    return
            if not data:
                return

    def close(self) -> None:
        """Cut the tunnel; a thread blocked reading it wakes (shutdown, then close: a close
        alone does not wake a blocked `recv` on Linux)."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()


class PortForward:
    """Forwards `host:local_port` on this machine to a job's port; `local_port` 0 takes a
    free one (see `address`). Start it with `start()` (background threads) or
    `serve_forever()`; `close()` stops listening and cuts the open tunnels."""

    def __init__(
        self,
        tunnel_url: str,
        token: str | None,
        *,
        host: str = "127.0.0.1",
        local_port: int = 0,
        timeout: float = 30.0,
        on_error: Callable[[GatewayClientError], None] | None = None,
        on_connection: Callable[[tuple[str, int]], None] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.tunnel_url = tunnel_url
        self._token = token
        self._timeout = timeout
        self._on_error = on_error
        self._on_connection = on_connection
        self._ssl_context = ssl_context
        self._listener = socket.create_server((host, local_port))
        self._closed = threading.Event()
        self._tunnels: set[Tunnel] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """Where it listens: (host, port)."""
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    @property
    def open_tunnels(self) -> int:
        with self._lock:
            return len(self._tunnels)

    def start(self) -> PortForward:
        """Accept connections in a background thread; returns at once."""
        if self._thread is None:
            self._thread = threading.Thread(target=self.serve_forever, daemon=True)
            self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Accept connections until `close()`."""
        while not self._closed.is_set():
            try:
                local, peer = self._listener.accept()
            except OSError:
                if self._closed.is_set():
                    return
                raise
            if self._on_connection is not None:
                self._on_connection((str(peer[0]), int(peer[1])))
            threading.Thread(target=self._serve, args=(local,), daemon=True).start()

    def _serve(self, local: socket.socket) -> None:
        try:
            tunnel = Tunnel(
                self.tunnel_url, self._token, timeout=self._timeout, ssl_context=self._ssl_context
            )
        except GatewayClientError as error:
            local.close()
            if self._on_error is not None:
                self._on_error(error)
            return
        with self._lock:
            if self._closed.is_set():
                tunnel.close()
                local.close()
                return
            self._tunnels.add(tunnel)
        try:
            tunnel.relay(local)
        finally:
            with self._lock:
                self._tunnels.discard(tunnel)

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes a blocked accept()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            tunnels = list(self._tunnels)
        for tunnel in tunnels:
            tunnel.close()

    def __enter__(self) -> PortForward:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
