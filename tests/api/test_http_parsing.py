"""What the serving stack (uvicorn with httptools, `iri_gateway.cli.serving`) answers to requests
its HTTP parser refuses, sent as raw bytes to a real `serve` (issue 25).

Each refused request is answered 400 "Invalid HTTP request received." with the connection
closed, before the application sees it: ambiguous framing (Content-Length with
Transfer-Encoding: the shape of request smuggling), folded header lines, bare-LF line ends,
control characters in a header value, and an HTTP/1.1 request without exactly one Host
(RFC 9112, 3.2: h11 refused it, httptools lets it pass, `http_protocol` refuses it again).
What the parser accepts is served as before: HTTP/1.0 without Host, pipelined requests,
HEAD. The pure-Python h11 parser served the Content-Length-with-Transfer-Encoding, folded
and bare-LF requests to the application, so these tests fail on it.
"""

from __future__ import annotations

import socket

import pytest

from tests.conftest import Server

FACILITY = b"GET /api/v2/facility HTTP/1.1\r\nHost: gateway\r\n"
REFUSED = b"HTTP/1.1 400 Bad Request\r\n"


def exchange(server: Server, request: bytes) -> bytes:
    """REQUEST sent on a new connection; everything the server sent until it closed the
    connection (each request here makes it close)."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(request)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    return answer


@pytest.mark.parametrize(
    "request_bytes",
    [
        pytest.param(b"GET /api/v2/facility HTTP/1.1\r\n\r\n", id="no-host"),
        pytest.param(FACILITY + b"Host: other\r\n\r\n", id="two-hosts"),
        pytest.param(
            b"POST /api/v2/facility HTTP/1.1\r\nHost: gateway\r\nContent-Length: 5\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            id="content-length-and-chunked",
        ),
        pytest.param(FACILITY + b"X-Folded: a\r\n  b\r\n\r\n", id="folded-header"),
        pytest.param(b"GET /api/v2/facility HTTP/1.1\nHost: gateway\n\n", id="bare-lf"),
        pytest.param(FACILITY + b"X-Control: a\x01b\r\n\r\n", id="control-character"),
        pytest.param(b"GARBAGE\r\n\r\n", id="not-http"),
        pytest.param(
            b"POST /api/v2/facility HTTP/1.1\r\nHost: gateway\r\nContent-Length: 1\r\n"
            b"Content-Length: 2\r\n\r\nab",
            id="two-lengths",
        ),
    ],
)
def test_a_request_the_parser_refuses_is_400_and_closed(
    server: Server, request_bytes: bytes
) -> None:
    answer = exchange(server, request_bytes)
    assert answer.startswith(REFUSED), answer[:300]
    assert answer.endswith(b"\r\n\r\nInvalid HTTP request received."), answer[:300]
    assert answer.count(b"HTTP/1.1 ") == 1, answer[:300]


@pytest.mark.parametrize(
    ("request_bytes", "answers"),
    [
        pytest.param(b"GET /api/v2/facility HTTP/1.0\r\n\r\n", 1, id="http-1.0-without-host"),
        pytest.param(FACILITY + b"\r\n" + FACILITY + b"Connection: close\r\n\r\n", 2, id="two"),
        pytest.param(
            b"HEAD /api/v2/facility HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n",
            1,
            id="head",
        ),
    ],
)
def test_what_the_parser_accepts_is_served(
    server: Server, request_bytes: bytes, answers: int
) -> None:
    answer = exchange(server, request_bytes)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:300]
    assert answer.count(b"HTTP/1.1 200 OK\r\n") == answers, answer[:300]
