"""A small blocking WebSocket client for the tests and benchmarks (wsproto over a socket).

`WebSocketSession(url, headers=...)` connects (`ws://` only) and hands back whole messages;
a handshake answered with another status than 101 raises WebSocketRefused with the status,
a `receive` after the server closed raises WebSocketClosed with its code and reason.
"""

from __future__ import annotations

import contextlib
import socket
from types import TracebackType
from urllib.parse import urlsplit

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)


class WebSocketRefused(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"refused with {status}: {body[:300]!r}")
        self.status, self.body = status, body


class WebSocketClosed(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"closed with {code}: {reason}")
        self.code, self.reason = code, reason


class WebSocketSession:
    """One WebSocket connection, messages sent and received whole."""

    def __init__(
        self,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        subprotocols: list[str] | None = None,
        timeout: float = 30,
    ) -> None:
        parts = urlsplit(url)
        assert parts.scheme == "ws", f"ws:// URLs only, not {url}"
        host, port = parts.hostname or "localhost", parts.port or 80
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.pending: list[object] = []
        self.close_code: int | None = None
        self.close_reason = ""
        self.subprotocol: str | None = None
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
        self._send(
            Request(
                host=parts.netloc,
                target=target or "/",
                extra_headers=extra,
                subprotocols=subprotocols or [],
            )
        )
        status, body = 0, b""
        while True:
            events = self._events()
            for index, event in enumerate(events):
                if isinstance(event, AcceptConnection):
                    # A server may send its first message in the same write as its 101:
                    # those events are the first `receive`'s, not dropped.
                    self.subprotocol = event.subprotocol
                    self.pending = events[index + 1 :]
                    return
                if isinstance(event, RejectConnection):
                    status = event.status_code
                    if not event.has_body:
                        self.sock.close()
                        raise WebSocketRefused(status, body)
                elif isinstance(event, RejectData):
                    body += event.data
                    if event.body_finished:
                        self.sock.close()
                        raise WebSocketRefused(status, body)

    def _send(self, event: object) -> None:
        self.sock.sendall(self.ws.send(event))  # type: ignore[arg-type]

    def _events(self) -> list[object]:
        data = self.sock.recv(65536)
        self.ws.receive_data(data or None)
        events = list(self.ws.events())
        if not data and not events:
            raise WebSocketClosed(1006, "the connection ended without a close")
        return events

    def send(self, message: str | bytes) -> None:
        self._send(
            TextMessage(data=message) if isinstance(message, str) else BytesMessage(data=message)
        )

    def receive(self) -> str | bytes:
        """The next whole message; WebSocketClosed once the server has closed."""
        parts: list[str | bytes] = []
        while True:
            if self.close_code is not None:
                raise WebSocketClosed(self.close_code, self.close_reason)
            events = self.pending or self._events()
            self.pending = []
            for index, event in enumerate(events):
                if isinstance(event, Message):
                    parts.append(event.data)
                    if event.message_finished:
                        self.pending = events[index + 1 :]
                        if isinstance(event, TextMessage):
                            return "".join(str(part) for part in parts)
                        return b"".join(bytes(part) for part in parts)  # type: ignore[arg-type]
                elif isinstance(event, Ping):
                    self._send(event.response())
                elif isinstance(event, CloseConnection):
                    self.close_code, self.close_reason = event.code, event.reason or ""
                    with contextlib.suppress(Exception):
                        self._send(event.response())

    def close(self) -> None:
        if self.close_code is None:
            with contextlib.suppress(Exception):
                self._send(CloseConnection(code=1000))
        self.sock.close()

    def __enter__(self) -> WebSocketSession:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def websocket_echo(
    url: str, messages: list[str | bytes], headers: dict[str, str] | None = None
) -> list[str | bytes]:
    """Each message sent and one reply read for it."""
    with WebSocketSession(url, headers=headers) as session:
        replies = []
        for message in messages:
            session.send(message)
            replies.append(session.receive())
        return replies
