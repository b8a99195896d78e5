"""One HTTP request forwarded to a job's port over an open connection, streamed both ways.

h11 speaks HTTP/1.1 to the service (the client side of the connection the proxy opened: on
this machine, or an SSH channel from the login node); the request's body goes on as it
arrives from the client while the answer comes back as it is sent, neither held whole, each
chunk through the user's byte meter. One connection per request, closed after it: a
service sees no other user's requests on it, and nothing is kept per job between requests.

An answer that never starts is 504 after `head_timeout`; a service that closes, answers
what is not HTTP or a head past `max_head_bytes` before its head is complete is 502; once
the head is sent, a failure can only cut the answer (the client sees it end early). A
client that goes away closes the service's connection; so does the job's end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket

import h11
from starlette.types import Receive, Scope, Send

from iri_gateway.api.proxy.rules import ForwardRules, request_headers, response_headers

CHUNK = 65536
PROBLEM = b"application/problem+json"


class _Upstream:
    """The service's side: h11's client state over an asyncio stream."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limit: int):
        self.reader, self.writer = reader, writer
        self.http = h11.Connection(h11.CLIENT, max_incomplete_event_size=limit)

    async def write(self, event: h11.Event) -> None:
        data = self.http.send(event)
        if data:
            self.writer.write(data)
            await self.writer.drain()

    async def next_event(self) -> h11.Event | type[h11.PAUSED]:
        while True:
            event = self.http.next_event()
            if event is not h11.NEED_DATA:
                return event  # type: ignore[return-value]
            data = await self.reader.read(CHUNK)
            self.http.receive_data(data)  # b"": the service closed


async def _problem(send: Send, status: int, title: str, detail: str) -> None:
    body = json.dumps(
        {"type": "about:blank", "status": status, "title": title, "detail": detail}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", PROBLEM),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _target(scope: Scope) -> bytes:
    path: bytes = scope.get("raw_path") or scope["path"].encode()
    query: bytes = scope.get("query_string", b"")
    return path + (b"?" + query if query else b"")


async def forward_http(
    scope: Scope, receive: Receive, send: Send, upstream: socket.socket, rules: ForwardRules
) -> None:
    """Forward the request of `scope` over `upstream` and its answer back."""
    reader, writer = await asyncio.open_connection(sock=upstream, limit=CHUNK)
    service = _Upstream(reader, writer, rules.max_head_bytes)
    client = scope.get("client")
    incoming = list(scope.get("headers", ()))
    headers = request_headers(
        incoming, rules, client=client[0] if client else None, scheme=scope.get("scheme", "http")
    )
    names = {name.lower() for name, _ in incoming}
    if b"content-length" not in names and b"transfer-encoding" in names:
        headers.append((b"transfer-encoding", b"chunked"))  # the body goes on as it comes

    async def cut_when_ended() -> None:
        await rules.ended.wait()
        writer.close()

    watch = asyncio.create_task(cut_when_ended())
    body: asyncio.Task[None] | None = None
    started = False
    try:
        await service.write(
            h11.Request(method=scope["method"], target=_target(scope), headers=headers)
        )
        body = asyncio.create_task(_send_body(receive, service, rules))
        try:
            head = await asyncio.wait_for(_head(service), rules.head_timeout)
        except TimeoutError:
            await _problem(
                send,
                504,
                "Gateway Timeout",
                f"the job's service sent no answer within {rules.head_timeout:g} s",
            )
            return
        except (h11.RemoteProtocolError, OSError) as error:
            await _problem(
                send, 502, "Bad Gateway", f"the job's service gave no HTTP answer: {error}"
            )
            return
        await send(
            {
                "type": "http.response.start",
                "status": head.status_code,
                "headers": response_headers(head.headers, rules.session_cookie),
            }
        )
        started = True
        while True:
            event = await service.next_event()
            if isinstance(event, h11.Data):
                await rules.meter(len(event.data))
                await send(
                    {"type": "http.response.body", "body": bytes(event.data), "more_body": True}
                )
            elif isinstance(event, h11.EndOfMessage):
                await send({"type": "http.response.body", "body": b""})
                return
            else:  # the service closed mid-answer: the answer is cut
                raise h11.RemoteProtocolError("the service closed its answer early")
    except (h11.RemoteProtocolError, h11.LocalProtocolError, OSError):
        if not started:
            await _problem(send, 502, "Bad Gateway", "the job's service closed the connection")
        # Started: the client sees the answer end early (uvicorn closes the connection).
    finally:
        watch.cancel()
        if body is not None:
            body.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await body
        writer.close()


async def _head(service: _Upstream) -> h11.Response:
    """The answer's head (informational answers such as 100 Continue skipped)."""
    while True:
        event = await service.next_event()
        if isinstance(event, h11.Response):
            return event
        if isinstance(event, h11.InformationalResponse):
            continue
        raise h11.RemoteProtocolError(f"the service answered {type(event).__name__}")


async def _send_body(receive: Receive, service: _Upstream, rules: ForwardRules) -> None:
    """The client's body, chunk by chunk, to the service; the client leaving closes it."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            service.writer.close()
            return
        chunk: bytes = message.get("body", b"")
        if chunk:
            await rules.meter(len(chunk))
            await service.write(h11.Data(data=chunk))
        if not message.get("more_body", False):
            await service.write(h11.EndOfMessage())
            # Keep listening: a client leaving while the answer streams ends it.
            while (await receive())["type"] != "http.disconnect":
                pass
            service.writer.close()
            return
