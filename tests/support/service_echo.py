"""A job's service for the port proxy's tests: HTTP and WebSocket echo, standard library only.

Run as a job's program (`python3 service_echo.py --port P --prefix /<job>/main/http/`, as a
plain process or inside a container with Python, no packages needed), it serves under
PREFIX:

- `ping`: `pong`;
- `big?bytes=N`: N bytes, chunked, 64 KiB at a time;
- `slow?seconds=S`: its head after S seconds;
- `cookies`: sets a cookie of its own (`theirs=1`) and tries to set the proxy's
  (`iri-proxy-session=forged`);
- `ws`: a WebSocket echo (RFC 6455: text stays text, binary stays binary, fragments joined,
  pings answered, a close echoed);
- anything else: the request as JSON: method, path, query, headers, body, and the port.

The WebSocket side is written here (a handshake and frames) because the image it runs in
has Python's standard library and nothing more.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import socket
import struct
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


def read_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def read_frame(sock: socket.socket) -> tuple[bool, int, bytes]:
    first, second = read_exact(sock, 2)
    length = second & 0x7F
    if length == 126:
        length = struct.unpack("!H", read_exact(sock, 2))[0]
    elif length == 127:
        length = struct.unpack("!Q", read_exact(sock, 8))[0]
    mask = read_exact(sock, 4) if second & 0x80 else b""
    payload = read_exact(sock, length)
    if mask:
        payload = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
    return bool(first & 0x80), first & 0x0F, payload


def write_frame(sock: socket.socket, opcode: int, payload: bytes) -> None:
    head = bytes([0x80 | opcode])
    if len(payload) < 126:
        head += bytes([len(payload)])
    elif len(payload) < 1 << 16:
        head += bytes([126]) + struct.pack("!H", len(payload))
    else:
        head += bytes([127]) + struct.pack("!Q", len(payload))
    sock.sendall(head + payload)


def echo_websocket(sock: socket.socket) -> None:
    message, kind = b"", 0
    while True:
        try:
            final, opcode, payload = read_frame(sock)
        except (ConnectionError, OSError):
            return
        if opcode == 0x8:  # close: answered with the same code
            write_frame(sock, 0x8, payload[:2])
            return
        if opcode == 0x9:
            write_frame(sock, 0xA, payload)
            continue
        if opcode == 0xA:
            continue
        if opcode in (0x1, 0x2):
            message, kind = payload, opcode
        else:
            message += payload
        if final:
            write_frame(sock, kind, message)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # http.server writes a head and its body in two sends: on a kept-alive connection Nagle's
    # algorithm holds the body until the client's delayed ACK (40 ms on Linux), which made
    # every direct request in benchmarks/port_proxy.py look 40 ms slower than it is.
    disable_nagle_algorithm = True
    prefix = "/"
    port = 0

    def log_message(self, format: str, *args: object) -> None:
        return

    def _answer(self) -> None:
        parts = urlsplit(self.path)
        rest = parts.path[len(self.prefix) :] if parts.path.startswith(self.prefix) else None
        query = parse_qs(parts.query)
        websocket = self.headers.get("Upgrade", "").lower() == "websocket"
        if rest in ("ws", "ws-greet") and websocket:
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", accept_key(self.headers["Sec-WebSocket-Key"]))
            asked = self.headers.get("Sec-WebSocket-Protocol")
            if asked:
                self.send_header("Sec-WebSocket-Protocol", asked.split(",")[0].strip())
            if rest == "ws-greet":
                # A first message in the same write as the handshake's answer, as a Jupyter
                # kernel's channel may send one: `hello` (text), then `\x00` (bytes).
                self._headers_buffer.append(b"\r\n")
                self._headers_buffer.append(b"\x81\x05hello\x82\x01\x00")
                self.wfile.write(b"".join(self._headers_buffer))
                self._headers_buffer = []
            else:
                self.end_headers()
            self.wfile.flush()
            echo_websocket(self.connection)
            self.close_connection = True
            return
        if rest == "ping":
            self._plain(b"pong")
            return
        if rest == "big":
            self._big(int(query.get("bytes", ["0"])[0]))
            return
        if rest == "slow":
            time.sleep(float(query.get("seconds", ["1"])[0]))
            self._plain(b"slow")
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else self._chunked_body()
        document = {
            "method": self.command,
            "path": parts.path,
            "query": parts.query,
            "headers": dict(self.headers.items()),
            "body": body.decode("utf-8", "replace"),
            "port": self.port,
        }
        data = json.dumps(document).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if rest == "cookies":
            self.send_header("Set-Cookie", "theirs=1; Path=/")
            self.send_header("Set-Cookie", "iri-proxy-session=forged; Path=/")
            self.send_header("Set-Cookie", "iri-session=forged; Path=/")
            self.send_header("Set-Cookie", "__Host-iri-csrf=forged; Path=/; Secure")
        self.end_headers()
        self.wfile.write(data)

    def _chunked_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
            return b""
        body = b""
        while True:
            size = int(self.rfile.readline().strip().split(b";")[0], 16)
            if size == 0:
                self.rfile.readline()
                return body
            body += self.rfile.read(size)
            self.rfile.readline()

    def _plain(self, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _big(self, size: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        block = b"x" * 65536
        left = size
        while left > 0:
            piece = block[: min(left, len(block))]
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            left -= len(piece)
        self.wfile.write(b"0\r\n\r\n")

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _answer


def main() -> None:
    parser = argparse.ArgumentParser(description="HTTP and WebSocket echo under a prefix")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--prefix", default="/")
    parser.add_argument("--host", default="0.0.0.0")
    options = parser.parse_args()
    Handler.prefix = options.prefix if options.prefix.endswith("/") else options.prefix + "/"
    Handler.port = options.port
    server = ThreadingHTTPServer((options.host, options.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
