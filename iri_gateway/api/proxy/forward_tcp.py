"""A raw TCP connection to a job's port, carried in a WebSocket's binary messages.

For services that do not speak HTTP (a database, an SSH server, a kernel's ZeroMQ ports),
`iri-gateway jobs forward` listens on the user's machine and opens one WebSocket per local
connection to the proxy's `/_iri/tunnel/<job>/<member>/<port>`; here each binary message
is written to the connection the proxy opened to the port, and whatever the service sends
comes back as binary messages, both ways through the user's byte meter. A WebSocket rather
than a bare upgrade or CONNECT: it passes every reverse proxy and load balancer a facility
puts in front (they all forward WebSockets), and its frames carry the stream's ends.

Text messages are refused (close 1003): a tunnel carries bytes, and a text message means
the client is not a tunnel client. The service closing its side closes the WebSocket
(1000); the client closing the WebSocket closes the service's connection; the job's end
closes both (1001, "the job has ended").
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

from starlette.types import Receive, Send

from iri_gateway.api.proxy.rules import ForwardRules

CHUNK = 65536
ENDED = 1001
UNSUPPORTED = 1003
SUBPROTOCOL = "iri-tunnel"
"""The subprotocol a tunnel client may ask for; the proxy accepts it when asked."""


async def forward_tcp(
    subprotocols: list[str],
    receive: Receive,
    send: Send,
    upstream: socket.socket,
    rules: ForwardRules,
) -> None:
    """Accept the WebSocket (its `websocket.connect` already received) and relay its binary
    messages to and from `upstream` until either side closes or the job ends."""
    reader, writer = await asyncio.open_connection(sock=upstream, limit=CHUNK)
    chosen = SUBPROTOCOL if SUBPROTOCOL in subprotocols else None
    await send({"type": "websocket.accept", "subprotocol": chosen})

    async def from_client() -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            if message["type"] != "websocket.receive":
                continue
            data = message.get("bytes")
            if data is None:
                await send(
                    {
                        "type": "websocket.close",
                        "code": UNSUPPORTED,
                        "reason": "a tunnel carries binary messages only",
                    }
                )
                return
            await rules.meter(len(data))
            writer.write(data)
            await writer.drain()

    async def from_service() -> None:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                await send(
                    {"type": "websocket.close", "code": 1000, "reason": "the service closed"}
                )
                return
            await rules.meter(len(data))
            await send({"type": "websocket.send", "bytes": data})

    async def job_ended() -> None:
        await rules.ended.wait()
        await send({"type": "websocket.close", "code": ENDED, "reason": "the job has ended"})

    tasks = [asyncio.create_task(work()) for work in (from_client, from_service, job_ended)]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            error = task.exception()
            if error is not None and not isinstance(error, OSError):
                raise error
    finally:
        for task in tasks:
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks, return_exceptions=True)
        writer.close()
