"""Raw TCP tunnels to a job's port (issue 29: `jobs forward`, the SDK's `forward_port`), end
to end on the `local` resource: a real serve with a proxy origin of its own, a real job
listening on its declared port (tests/support/service_echo.py), and the SDK's forward
listening on this machine.

What is held here: the bytes of a local connection reach the port unchanged both ways
(several connections at once, megabytes each); the tunnel takes the owner's bearer token
and nothing else (no token: 401, a session cookie: 401, another user: 404, a plain HTTP
request: 426, a text message: closed 1003); a tunnel is cut when its job ends, and a new
local connection to an ended job is refused with 410 reported to `on_error`.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from iri_gateway.client import GatewayClient, GatewayClientError, Gone, NotFound
from tests.support.port_proxy import ProxyGateway as Gateway
from tests.support.port_proxy import auth, proxy_gateway
from tests.support.serve import free_port
from tests.support.websocket_client import WebSocketClosed, WebSocketRefused, WebSocketSession

SERVICE = Path(__file__).parent.parent / "support" / "service_echo.py"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with proxy_gateway(tmp_path_factory.mktemp("tunnel-gateway")) as served:
        yield served


def launch_echo(gateway: Gateway, seconds: int) -> str:
    """A job serving the echo on its port `http` for `seconds`, once it answers."""
    command = (
        f'timeout {seconds} {sys.executable} {SERVICE} --port "$IRI_PORT_HTTP" '
        '--prefix "$IRI_PROXY_PATH_HTTP"'
    )
    spec = {"executable": "/bin/bash", "arguments": ["-c", command], "ports": {"http": free_port()}}
    answer = httpx.post(
        f"{gateway.api}/api/v2/compute/job/local", json=spec, headers=auth(gateway.alice)
    )
    assert answer.status_code == 200, answer.text
    job_id: str = answer.json()["id"]
    deadline = time.monotonic() + 30
    while True:
        ping = httpx.get(
            f"{gateway.proxy}/{job_id}/main/http/ping", headers=auth(gateway.alice), timeout=10
        )
        if ping.status_code == 200:
            return job_id
        assert time.monotonic() < deadline, ping.text
        time.sleep(0.2)


def state(gateway: Gateway, job_id: str) -> str:
    answer = httpx.get(
        f"{gateway.api}/api/v2/compute/status/local/{job_id}", headers=auth(gateway.alice)
    )
    value: str = answer.json()["status"]["state"]
    return value


def cancel(gateway: Gateway, job_id: str) -> None:
    httpx.delete(f"{gateway.api}/api/v2/compute/cancel/local/{job_id}", headers=auth(gateway.alice))


def tunnel_url(gateway: Gateway, job_id: str) -> str:
    listed = httpx.get(
        f"{gateway.api}/api/v2/compute/ports/local/{job_id}", headers=auth(gateway.alice)
    )
    assert listed.status_code == 200, listed.text
    url: str = listed.json()[0]["tunnel"]
    return url


def raw_get(address: tuple[str, int], path: str) -> bytes:
    """An HTTP/1.0 GET over a plain socket, the whole answer (the server closes after it);
    b"" when the connection is closed unanswered (a reset too: the forward closes a
    connection whose tunnel was refused without reading what it sent)."""
    parts = []
    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(f"GET {path} HTTP/1.0\r\nHost: anywhere\r\n\r\n".encode())
        try:
            while chunk := sock.recv(65536):
                parts.append(chunk)
        except ConnectionResetError:
            assert not parts
    return b"".join(parts)


def answered_pong(held: socket.socket) -> None:
    """Read the echo's answer to `/ping` on a kept-alive connection, to its body (the head
    and the body may come in two reads)."""
    received = b""
    while b"pong" not in received:
        part = held.recv(65536)
        assert part, f"the tunnel closed before the answer's body: {received!r}"
        received += part


def test_a_forwarded_port_carries_connections_both_ways_unchanged(gateway: Gateway) -> None:
    job_id = launch_echo(gateway, 120)
    try:
        assert tunnel_url(gateway, job_id) == (
            f"{gateway.proxy.replace('http://', 'ws://')}/_iri/tunnel/{job_id}/main/http"
        )
        with (
            GatewayClient(gateway.api, gateway.alice) as client,
            client.forward_port("local", job_id, "http") as forward,
        ):
            host, port = forward.address
            assert host == "127.0.0.1"
            base = f"http://127.0.0.1:{port}/{job_id}/main/http"
            seen = httpx.get(f"{base}/hello?x=1", timeout=30).json()
            # Bytes pass as they are: the service sees the client's own request, and no
            # token, the user's or the job's, is added on the way.
            assert seen["path"] == f"/{job_id}/main/http/hello"
            headers = {name.lower(): value for name, value in seen["headers"].items()}
            assert headers["host"] == f"127.0.0.1:{port}"
            assert "authorization" not in headers
            assert gateway.alice not in str(seen)

            sizes = [3_000_000, 1_000_000, 2_000_000, 1]
            results: dict[int, int] = {}

            def fetch(size: int) -> None:
                answer = httpx.get(f"{base}/big?bytes={size}", timeout=60)
                results[size] = len(answer.content) if answer.content == b"x" * size else -1

            threads = [threading.Thread(target=fetch, args=(size,)) for size in sizes]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=90)
            assert results == {size: size for size in sizes}
            posted = httpx.post(f"{base}/echo", content=b"\x00\xff" * 100_000, timeout=30)
            assert len(posted.json()["body"]) == 200_000
    finally:
        cancel(gateway, job_id)


def test_a_tunnel_takes_the_owners_bearer_token_and_nothing_else(gateway: Gateway) -> None:
    job_id = launch_echo(gateway, 120)
    try:
        url = tunnel_url(gateway, job_id)
        for headers, status in [
            ({}, 401),
            ({"Cookie": "iri-proxy-session=anything"}, 401),
            (auth(gateway.bob), 404),
            ({"Authorization": "Bearer not-a-token"}, 401),
        ]:
            with pytest.raises(WebSocketRefused) as refused, WebSocketSession(url, headers=headers):
                pass
            assert refused.value.status == status, refused.value.body
        plain = httpx.get(url.replace("ws://", "http://"), headers=auth(gateway.alice))
        assert plain.status_code == 426
        assert "WebSocket" in plain.json()["detail"]
        with WebSocketSession(url, headers=auth(gateway.alice)) as session:
            session.send("text is not a tunnel's")
            with pytest.raises(WebSocketClosed) as closed:
                session.receive()
            assert closed.value.code == 1003
        # The SDK asks the job's ports first: another user's job is not found.
        with (
            GatewayClient(gateway.api, gateway.bob) as client,
            pytest.raises(NotFound, match=job_id),
        ):
            client.forward_port("local", job_id, "http")
        with GatewayClient(gateway.api, gateway.alice) as client:
            with pytest.raises(NotFound, match=r"declares no port 'other'.*main/http"):
                client.forward_port("local", job_id, "other")
            with pytest.raises(NotFound):
                client.forward_port("local", job_id, "http", member="worker1")
    finally:
        cancel(gateway, job_id)


def test_a_tunnel_ends_with_its_job_and_then_is_refused_as_gone(gateway: Gateway) -> None:
    job_id = launch_echo(gateway, 8)
    refusals: list[GatewayClientError] = []
    try:
        with GatewayClient(gateway.api, gateway.alice) as client:
            forward = client.forward_port("local", job_id, "http", on_error=refusals.append)
        with forward, socket.create_connection(forward.address, timeout=30) as held:
            # A keep-alive request, answered, and the connection left open.
            held.sendall(f"GET /{job_id}/main/http/ping HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            answered_pong(held)
            deadline = time.monotonic() + 40
            while state(gateway, job_id) not in {"completed", "failed", "canceled"}:
                assert time.monotonic() < deadline
                time.sleep(0.2)
            held.settimeout(15)
            assert held.recv(65536) == b""  # cut: by the service's end or the job's
            answer = raw_get(forward.address, f"/{job_id}/main/http/ping")
            assert answer == b""
            deadline = time.monotonic() + 10
            while not refusals and time.monotonic() < deadline:
                time.sleep(0.1)
        assert refusals and isinstance(refusals[0], Gone), refusals
        assert "ended" in refusals[0].detail
    finally:
        cancel(gateway, job_id)


def test_a_forward_stops_listening_and_cuts_its_tunnels_when_closed(gateway: Gateway) -> None:
    job_id = launch_echo(gateway, 120)
    try:
        with GatewayClient(gateway.api, gateway.alice) as client:
            forward = client.forward_port("local", job_id, "http").start()
        address = forward.address
        with socket.create_connection(address, timeout=30) as held:
            held.sendall(f"GET /{job_id}/main/http/ping HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            answered_pong(held)
            deadline = time.monotonic() + 10
            while forward.open_tunnels != 1:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            forward.close()
            held.settimeout(10)
            assert held.recv(65536) == b""
        with pytest.raises(OSError):
            socket.create_connection(address, timeout=5).close()
    finally:
        cancel(gateway, job_id)
