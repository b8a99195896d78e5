"""RSA keys and a JWKS served on loopback by a real HTTP server, for the JWT tests (a pytest
plug-in, registered in tests/conftest.py; module-scoped: each test module gets its own)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa


@pytest.fixture(scope="module")
def keys() -> tuple[Any, Any]:
    good = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return good, other


@pytest.fixture(scope="module")
def jwks_url(keys: tuple[Any, Any]) -> Iterator[str]:
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(keys[0].public_key()))
    document = json.dumps({"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = document.encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
    server.shutdown()
