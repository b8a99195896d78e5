"""The AmSC rules for JWTs (issue 31): an exact audience, a leeway for clock skew, and the
identity provider asked whether the token is still active (RFC 7662 introspection, served
here by a real HTTP server on loopback), refusing when it cannot answer (fail-closed, 503),
and never on the event loop: a provider that hangs does not stall other requests."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import anyio
import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.api.app import create_app
from iri_gateway.service.operations.settings import Settings
from tests.api.test_jwt_auth import AUDIENCE, ISSUER
from tests.api.test_jwt_auth import token as signed
from tests.support.http_server import QuietHandler, http_server

pytestmark = pytest.mark.anyio

CAPS = "/api/v2/compute/capabilities/local"
CLIENT = ("iri-gateway", "s3cret")


@dataclass
class Provider:
    """The introspection endpoint's state: tokens revoked, how it answers, what it saw."""

    url: str = ""
    revoked: set[str] = field(default_factory=set)
    mode: str = "ok"  # ok, down (HTTP 500), garbage (not RFC 7662), hang (until released)
    released: threading.Event = field(default_factory=threading.Event)
    asked: list[tuple[str, str]] = field(default_factory=list)  # (client credentials, token)


@pytest.fixture
def provider() -> Iterator[Provider]:
    state = Provider()

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            form = parse_qs(self.rfile.read(length).decode())
            basic = self.headers.get("Authorization", "").removeprefix("Basic ")
            token = form.get("token", [""])[0]
            state.asked.append((base64.b64decode(basic).decode(), token))
            if state.mode == "hang":
                state.released.wait(30)
            if state.mode == "down":
                self.send_response(500)
                self.end_headers()
                return
            body = (
                b"<html>maintenance</html>"
                if state.mode == "garbage"
                else json.dumps({"active": token not in state.revoked}).encode()
            )
            self.answer_json(body)

    with http_server(Handler) as url:
        state.url = f"{url}/introspect"
        yield state
        state.released.set()


@pytest.fixture
async def gateway(
    jwks_url: str, provider: Provider, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[httpx.AsyncClient]:
    extra: dict[str, Any] = getattr(request, "param", {})
    chosen: dict[str, Any] = {
        "auth": "jwt",
        "jwks_url": jwks_url,
        "jwt_issuer": ISSUER,
        "jwt_audience": AUDIENCE,
        "jwt_username_claim": "preferred_username",
        "jwt_exact_audience": True,
        "jwt_introspection_url": provider.url,
        "jwt_introspection_client_id": CLIENT[0],
        "jwt_introspection_client_secret": CLIENT[1],
        "jwt_introspection_cache": 0,
    }
    settings = Settings(data_dir=tmp_path, **chosen | extra)
    app: FastAPI = create_app(settings, run_poller=False)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as client:
        yield client
    app.state.engine.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_an_active_token_is_accepted_and_a_revoked_one_refused_at_once(
    gateway: httpx.AsyncClient, provider: Provider, keys: tuple[Any, Any]
) -> None:
    token = signed(keys[0])
    assert (await gateway.get(CAPS, headers=bearer(token))).status_code == 200
    assert provider.asked == [(f"{CLIENT[0]}:{CLIENT[1]}", token)]
    provider.revoked.add(token)
    refused = await gateway.get(CAPS, headers=bearer(token))
    assert refused.status_code == 401, refused.text
    assert "no longer active" in refused.json()["detail"]


@pytest.mark.parametrize("mode", ["down", "garbage"])
async def test_a_provider_that_does_not_answer_refuses_the_token(
    gateway: httpx.AsyncClient, provider: Provider, keys: tuple[Any, Any], mode: str
) -> None:
    provider.mode = mode
    refused = await gateway.get(CAPS, headers=bearer(signed(keys[0])))
    assert refused.status_code == 503, refused.text
    assert refused.headers["Retry-After"] == "5"
    assert "refused until it answers" in refused.json()["detail"]


@pytest.mark.parametrize("gateway", [{"jwt_introspection_cache": 60}], indirect=True)
async def test_an_active_answer_is_trusted_for_the_cache_time(
    gateway: httpx.AsyncClient, provider: Provider, keys: tuple[Any, Any]
) -> None:
    token = signed(keys[0])
    assert (await gateway.get(CAPS, headers=bearer(token))).status_code == 200
    provider.mode = "down"
    assert (await gateway.get(CAPS, headers=bearer(token))).status_code == 200
    assert len(provider.asked) == 1
    other = signed(keys[0], preferred_username="dave")
    assert (await gateway.get(CAPS, headers=bearer(other))).status_code == 503


async def test_a_hanging_provider_stalls_no_other_request(
    gateway: httpx.AsyncClient, provider: Provider, keys: tuple[Any, Any]
) -> None:
    provider.mode = "hang"
    answers: list[int] = []

    async def waiting() -> None:
        answers.append((await gateway.get(CAPS, headers=bearer(signed(keys[0])))).status_code)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(waiting)
        while not provider.asked:
            await anyio.sleep(0.01)
        # The first request waits on the provider in a thread; the loop serves this one.
        health = await gateway.get("/health")
        assert health.status_code == 200 and answers == []
        provider.mode = "ok"
        provider.released.set()
    assert answers == [200]


async def test_a_token_for_other_services_too_is_refused(
    gateway: httpx.AsyncClient, provider: Provider, keys: tuple[Any, Any]
) -> None:
    shared = signed(keys[0], aud=[AUDIENCE, "https://other.example"])
    refused = await gateway.get(CAPS, headers=bearer(shared))
    assert refused.status_code == 401, refused.text
    assert f"audience is {AUDIENCE!r} alone" in refused.json()["detail"]
    assert provider.asked == []  # refused before the provider is asked
    alone = signed(keys[0], aud=[AUDIENCE])
    assert (await gateway.get(CAPS, headers=bearer(alone))).status_code == 200


@pytest.mark.parametrize("gateway", [{"jwt_leeway": 60}], indirect=True)
async def test_the_leeway_forgives_a_clock_a_little_behind(
    gateway: httpx.AsyncClient, keys: tuple[Any, Any]
) -> None:
    just_ended = signed(keys[0], exp=int(time.time()) - 10)
    assert (await gateway.get(CAPS, headers=bearer(just_ended))).status_code == 200
    long_ended = signed(keys[0], exp=int(time.time()) - 120)
    assert (await gateway.get(CAPS, headers=bearer(long_ended))).status_code == 401


async def test_without_leeway_an_ended_token_is_refused(
    gateway: httpx.AsyncClient, keys: tuple[Any, Any]
) -> None:
    just_ended = signed(keys[0], exp=int(time.time()) - 10)
    assert (await gateway.get(CAPS, headers=bearer(just_ended))).status_code == 401


def test_an_introspection_url_needs_the_gateways_client(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="jwt_introspection_client_id"):
        Settings(data_dir=tmp_path, jwt_introspection_url="http://idp.test/introspect")
