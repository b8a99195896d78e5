"""A real OpenID provider (node-oidc-provider, `tests/support/oidc_provider/provider.mjs`),
started by a test on a free port of 127.0.0.1 and stopped after it; and a user's way through
its own login page without a browser (`sign_in`, `access_token`), for the tests that drive
the flow over HTTP. Node.js and the package (`npm ci` in that folder, which scripts/test-all
runs) missing: the test fails saying how to have them.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx

from tests.support.serve import free_port, serve_process

FOLDER = Path(__file__).parent / "oidc_provider"
OTHER_AUDIENCE = "urn:example:other-service"
"""A resource the provider also makes tokens for: not the gateway."""
CLIENTS = {"iri-console": "console-secret", "iri-console-brief": "brief-secret"}
"""The provider's clients and their secrets; `iri-console-brief`'s access tokens live 3 s."""


@dataclass(frozen=True)
class Provider:
    """A running provider: its issuer (also its base URL) and the redirect it allows."""

    issuer: str
    redirect_uri: str
    audience: str

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/jwks"


@contextmanager
def running_provider(folder: Path, *, redirect_uri: str, audience: str) -> Iterator[Provider]:
    """The provider, its console clients allowed to come back to `redirect_uri` only, its
    access tokens JWTs for `audience` (or `OTHER_AUDIENCE` when asked for)."""
    node = shutil.which("node")
    assert node, "no `node` on PATH: `apt-get install nodejs npm` (scripts/test-all does)"
    assert (FOLDER / "node_modules" / "oidc-provider").is_dir(), (
        f"the provider's package is not installed: `npm ci --prefix {FOLDER}` "
        "(scripts/test-all does)"
    )
    port = free_port()
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "openid-provider.log"
    environment = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "OP_PORT": str(port),
        "OP_REDIRECT": redirect_uri,
        "OP_AUDIENCE": audience,
    }
    issuer = f"http://127.0.0.1:{port}"
    argv = [node, str(FOLDER / "provider.mjs")]
    with serve_process(argv, log, environment, cwd=FOLDER) as process:
        _wait_ready(issuer, process, log)
        yield Provider(issuer, redirect_uri, audience)


def _wait_ready(issuer: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, f"the provider exited: {log.read_text()[-4000:]}"
        try:
            found = httpx.get(f"{issuer}/.well-known/openid-configuration", timeout=2)
            if found.status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"the provider never answered: {log.read_text()}"
        time.sleep(0.2)


def sign_in(provider: Provider, authorize_url: str, user: str, client: httpx.Client) -> str:
    """Sign `user` in at the provider's own login page (any password), starting from
    `authorize_url`; the address the provider sends the browser back to (the redirect URI
    with its code and state). `client` keeps the provider's cookies (the user's session)."""
    answer = client.get(authorize_url)
    while answer.status_code in (302, 303):
        location = urljoin(provider.issuer, answer.headers["location"])
        if location.startswith(provider.redirect_uri):
            return location
        answer = client.get(location)
    form = re.search(r'<form[^>]*action="([^"]+)"', answer.text)
    assert answer.status_code == 200 and form, answer.text[-2000:]
    answer = client.post(
        urljoin(provider.issuer, form.group(1)),
        data={"prompt": "login", "login": user, "password": "any password"},
    )
    while answer.status_code in (302, 303):
        location = urljoin(provider.issuer, answer.headers["location"])
        if location.startswith(provider.redirect_uri):
            return location
        answer = client.get(location)
    raise AssertionError(f"the provider did not send the user back: {answer.text[-2000:]}")


def access_token(
    provider: Provider,
    user: str,
    *,
    client_id: str = "iri-console",
    resource: str | None = None,
    scope: str = "openid profile iri.write",
) -> str:
    """An access token the provider issues to `user` through a whole authorization code flow
    with PKCE (as a command-line client would have one), for `resource` (default: the
    gateway's audience)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": provider.redirect_uri,
        "scope": scope,
        "state": secrets.token_urlsafe(16),
        "nonce": secrets.token_urlsafe(16),
        "code_challenge": challenge.rstrip(b"=").decode(),
        "code_challenge_method": "S256",
        "resource": resource or provider.audience,
    }
    with httpx.Client(timeout=20) as client:
        authorize = client.build_request("GET", f"{provider.issuer}/auth", params=query)
        back = sign_in(provider, str(authorize.url), user, client)
        code = parse_qs(urlsplit(back).query)["code"][0]
        tokens = client.post(
            f"{provider.issuer}/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": provider.redirect_uri,
                "code_verifier": verifier,
            },
            auth=(client_id, CLIENTS[client_id]),
        )
    assert tokens.status_code == 200, tokens.text
    token: str = tokens.json()["access_token"]
    return token
