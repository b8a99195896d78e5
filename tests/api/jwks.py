"""RSA keys and a JWKS served on loopback by a real HTTP server, for the JWT tests (a pytest
plug-in, registered in tests/conftest.py; module-scoped: each test module gets its own)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.http_server import QuietHandler, http_server


@pytest.fixture(scope="module")
def keys() -> tuple[Any, Any]:
    good = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return good, other


@pytest.fixture(scope="module")
def jwks_url(keys: tuple[Any, Any]) -> Iterator[str]:
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(keys[0].public_key()))
    document = json.dumps({"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]})

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            self.answer_json(document.encode())

    with http_server(Handler) as url:
        yield f"{url}/jwks.json"
