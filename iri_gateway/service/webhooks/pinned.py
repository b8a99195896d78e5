"""One delivery POST, connected to the address the destination check approved and no other.

Why: checking a host's addresses and then letting the HTTP client resolve the name again
leaves a window in which DNS can answer differently (a rebinding attack). Here httpx runs
over an httpcore connection pool whose network backend ignores the name and connects to the
checked address; the name still goes in the Host header and in TLS (SNI and the
certificate's check), so https works as usual. No proxy from the environment is used, no
redirect is followed, and at most `MAX_ANSWER_BYTES` of the answer are read.
"""

from __future__ import annotations

import ssl
import time
import typing
from dataclasses import dataclass

import httpcore
import httpx

from iri_gateway import __version__
from iri_gateway.service.webhooks.destinations import Destination

MAX_ANSWER_BYTES = 64 * 1024
"""Most bytes of a receiver's answer read (its start is kept as the error when it fails)."""
SHOWN_ANSWER = 300
"""Characters of a failed answer's body kept with the delivery."""


class PinnedBackend(httpcore.NetworkBackend):
    """httpcore's synchronous backend, connecting every TCP connection to one address."""

    def __init__(self, address: str) -> None:
        self._address = address
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        return self._backend.connect_tcp(
            self._address, port, timeout, local_address, socket_options
        )

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("webhooks connect over TCP only")


class PinnedTransport(httpx.BaseTransport):
    """An httpx transport over an httpcore pool on a `PinnedBackend`."""

    def __init__(self, address: str, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context or ssl.create_default_context(),
            max_connections=1,
            retries=0,
            network_backend=PinnedBackend(address),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        answer = self._pool.handle_request(
            httpcore.Request(
                method=request.method,
                url=httpcore.URL(
                    scheme=request.url.raw_scheme,
                    host=request.url.raw_host,
                    port=request.url.port,
                    target=request.url.raw_path,
                ),
                headers=request.headers.raw,
                content=request.read(),  # a delivery's body: bytes already in memory
                extensions=request.extensions,
            )
        )
        assert isinstance(answer.stream, typing.Iterable)
        return httpx.Response(
            status_code=answer.status,
            headers=answer.headers,
            stream=_Stream(answer.stream),
            extensions=answer.extensions,
        )

    def close(self) -> None:
        self._pool.close()


class _Stream(httpx.SyncByteStream):
    def __init__(self, stream: typing.Iterable[bytes]) -> None:
        self._stream = stream

    def __iter__(self) -> typing.Iterator[bytes]:
        yield from self._stream

    def close(self) -> None:
        if hasattr(self._stream, "close"):
            self._stream.close()


@dataclass(frozen=True)
class Outcome:
    """How one attempt went: the answer's status (None: no answer) and, unless it was a
    2xx, why it failed."""

    status: int | None
    error: str | None

    @property
    def delivered(self) -> bool:
        return self.error is None


def post(
    destination: Destination,
    body: bytes,
    headers: dict[str, str],
    *,
    timeout: float,
    ssl_context: ssl.SSLContext | None = None,
) -> Outcome:
    """POST `body` to `destination` (its checked address) and read at most
    MAX_ANSWER_BYTES of the answer within `timeout` seconds of the first byte; any 2xx is
    delivered, anything else (a redirect included) is an error with its reason."""
    sent = {
        "Content-Type": "application/json",
        "User-Agent": f"iri-gateway-webhooks/{__version__}",
        **headers,
    }
    transport = PinnedTransport(destination.address, ssl_context=ssl_context)
    try:
        with (
            httpx.Client(
                transport=transport,
                timeout=httpx.Timeout(timeout),
                follow_redirects=False,
                trust_env=False,
            ) as client,
            client.stream("POST", destination.url, content=body, headers=sent) as answer,
        ):
            start = time.monotonic()
            kept = bytearray()
            for chunk in answer.iter_raw():
                kept += chunk[: MAX_ANSWER_BYTES - len(kept)]
                if len(kept) >= MAX_ANSWER_BYTES or time.monotonic() - start > timeout:
                    break
            status = answer.status_code
    except (httpx.TimeoutException, httpcore.TimeoutException) as error:
        return Outcome(None, f"no answer within {timeout:g} s ({type(error).__name__})")
    except Exception as error:  # any other fault of the attempt is its recorded reason
        said = " ".join(str(error).split())[:SHOWN_ANSWER] or type(error).__name__
        return Outcome(None, f"{type(error).__name__}: {said}")
    if 200 <= status < 300:
        return Outcome(status, None)
    text = bytes(kept).decode("utf-8", errors="replace")
    text = " ".join(text.split())[:SHOWN_ANSWER]
    why = "a redirect, which is never followed" if 300 <= status < 400 else "not 2xx"
    return Outcome(status, f"answered {status} ({why})" + (f": {text}" if text else ""))
