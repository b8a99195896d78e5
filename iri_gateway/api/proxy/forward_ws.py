"""A WebSocket forwarded to a job's port, message by message.

The server in front (uvicorn, with wsproto) has already taken the client's handshake apart
into ASGI messages, so the proxy is itself a WebSocket client of the service: wsproto over
the connection the proxy opened, the handshake carrying the rewritten headers (`rules.py`)
and the subprotocols the client asked for. The client is accepted only once the service
has accepted (with the subprotocol the service chose); a service that refuses makes the
client's handshake fail with the service's status. Then messages go both ways whole (a
fragmented message is joined first), each through the user's byte meter; pings from the
service are answered here; a close from either side is passed on with its code; the job's
end closes both (1001, "the job has ended").
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

from starlette.types import Receive, Scope, Send
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

from iri_gateway.api.proxy.rules import ForwardRules, request_headers

CHUNK = 65536
ENDED = 1001
NOT_SENDABLE = {1005, 1006, 1015}
"""Close codes that only describe a close and may not be sent in one (RFC 6455 7.4.1)."""


def _code(code: int | None) -> int:
    return 1000 if code is None or code in NOT_SENDABLE else code


class _Service:
    """The service's side of the WebSocket."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.pending: list[object] = []
        """Events read with the handshake's answer, after it: the service's first messages
        may arrive in the same read as its `101` (a kernel's status, at once)."""

    async def send(self, event: object) -> None:
        self.writer.write(self.ws.send(event))  # type: ignore[arg-type]
        await self.writer.drain()

    async def events(self) -> list[object]:
        """The next events; [] when the service's connection ended."""
        if self.pending:
            waiting, self.pending = self.pending, []
            return waiting
        data = await self.reader.read(CHUNK)
        self.ws.receive_data(data or None)
        return list(self.ws.events())


async def forward_websocket(
    scope: Scope, receive: Receive, send: Send, upstream: socket.socket, rules: ForwardRules
) -> None:
    """Forward the WebSocket of `scope` (its `websocket.connect` already received) over
    `upstream`."""
    reader, writer = await asyncio.open_connection(sock=upstream, limit=CHUNK)
    service = _Service(reader, writer)
    try:
        if not await _handshake(scope, send, service, rules):
            return
        await _relay(receive, send, service, rules)
    finally:
        writer.close()


async def _handshake(scope: Scope, send: Send, service: _Service, rules: ForwardRules) -> bool:
    """The service's handshake; the client accepted (True) or refused as the service did."""
    incoming = list(scope.get("headers", ()))
    host = next((value for name, value in incoming if name == b"host"), b"")
    client = scope.get("client")
    headers = request_headers(
        incoming,
        rules,
        client=client[0] if client else None,
        scheme=scope.get("scheme", "ws"),
        websocket=True,
    )
    path: bytes = scope.get("raw_path") or scope["path"].encode()
    query: bytes = scope.get("query_string", b"")
    target = (path + (b"?" + query if query else b"")).decode("latin-1")
    await service.send(
        Request(
            host=host.decode("latin-1"),
            target=target,
            extra_headers=headers,
            subprotocols=list(scope.get("subprotocols", [])),
        )
    )
    status, body = 502, b""
    try:
        async with asyncio.timeout(rules.head_timeout):
            answered = False
            while not answered:
                events = await service.events()
                if not events and service.reader.at_eof():
                    break
                for index, event in enumerate(events):
                    if isinstance(event, AcceptConnection):
                        service.pending = events[index + 1 :]
                        await send({"type": "websocket.accept", "subprotocol": event.subprotocol})
                        return True
                    if isinstance(event, RejectConnection):
                        status, answered = event.status_code, not event.has_body
                    elif isinstance(event, RejectData):
                        body += event.data
                        answered = event.body_finished
    except TimeoutError:
        status, body = 504, f"no handshake within {rules.head_timeout:g} s".encode()
    await _refuse(scope, send, status, body or b"the job's service refused the WebSocket")
    return False


async def _refuse(scope: Scope, send: Send, status: int, body: bytes) -> None:
    if "websocket.http.response" in scope.get("extensions", {}):
        await send(
            {
                "type": "websocket.http.response.start",
                "status": status,
                "headers": [(b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1011})


async def _relay(receive: Receive, send: Send, service: _Service, rules: ForwardRules) -> None:
    """Messages both ways until either side closes or the job ends."""

    async def from_client() -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                with contextlib.suppress(Exception):
                    await service.send(CloseConnection(code=_code(message.get("code"))))
                return
            if message["type"] != "websocket.receive":
                continue
            data: str | bytes | None = message.get("text")
            if data is None:
                data = message.get("bytes") or b""
            await rules.meter(len(data))
            event = TextMessage(data=data) if isinstance(data, str) else BytesMessage(data=data)
            await service.send(event)

    async def from_service() -> None:
        parts: list[str | bytes] = []
        while True:
            events = await service.events()
            if not events and service.reader.at_eof():
                await send(
                    {"type": "websocket.close", "code": 1011, "reason": "the service went away"}
                )
                return
            for event in events:
                if isinstance(event, Message):
                    parts.append(event.data)
                    if not event.message_finished:
                        continue
                    whole = "".join(parts) if isinstance(event, TextMessage) else b"".join(parts)  # type: ignore[arg-type]
                    parts = []
                    await rules.meter(len(whole))
                    key = "text" if isinstance(whole, str) else "bytes"
                    await send({"type": "websocket.send", key: whole})
                elif isinstance(event, Ping):
                    await service.send(event.response())
                elif isinstance(event, CloseConnection):
                    with contextlib.suppress(Exception):
                        await service.send(event.response())
                    await send(
                        {
                            "type": "websocket.close",
                            "code": _code(event.code),
                            "reason": event.reason or "",
                        }
                    )
                    return

    async def job_ended() -> None:
        await rules.ended.wait()
        with contextlib.suppress(Exception):
            await service.send(CloseConnection(code=ENDED, reason="the job has ended"))
        await send({"type": "websocket.close", "code": ENDED, "reason": "the job has ended"})

    tasks = [asyncio.create_task(work()) for work in (from_client, from_service, job_ended)]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task.exception() is not None and not isinstance(task.exception(), OSError):
                raise task.exception()  # type: ignore[misc]
    finally:
        for task in tasks:
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks, return_exceptions=True)
