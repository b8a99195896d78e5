"""JWT bearer tokens verified against a JWKS served by a real HTTP server on loopback."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from fastapi import FastAPI

from iri_gateway.api.app import create_app
from iri_gateway.service.operations.settings import Settings

pytestmark = pytest.mark.anyio
ISSUER, AUDIENCE = "https://idp.test", "iri-gateway"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def jwt_settings(data_dir: Path, jwks_url: str, **extra: Any) -> Settings:
    """The settings of a gateway that takes JWTs of the test identity provider (its JWKS at
    `jwks_url`, ISSUER, AUDIENCE; the user in `preferred_username`), and `extra`."""
    return Settings(
        data_dir=data_dir,
        auth="jwt",
        jwks_url=jwks_url,
        jwt_issuer=ISSUER,
        jwt_audience=AUDIENCE,
        jwt_username_claim="preferred_username",
        **extra,
    )


@asynccontextmanager
async def asgi_client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client of `app` over ASGI."""
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as client:
        yield client


@pytest.fixture
async def client(jwks_url: str, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app: FastAPI = create_app(jwt_settings(tmp_path, jwks_url), run_poller=False)
    async with asgi_client(app) as client:
        yield client


def token(key: Any, **claims: Any) -> str:
    body = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "exp": int(time.time()) + 300,
        "preferred_username": "carol",
        "projects": "p1 p2",
        **claims,
    }
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": "k1"})


async def caps(client: httpx.AsyncClient, bearer: str) -> httpx.Response:
    return await client.get(
        "/api/v2/compute/capabilities/local", headers={"Authorization": f"Bearer {bearer}"}
    )


async def test_valid_token_is_accepted(client: httpx.AsyncClient, keys: tuple[Any, Any]) -> None:
    assert (await caps(client, token(keys[0]))).status_code == 200


@pytest.mark.parametrize(
    "claims",
    [
        {"exp": int(time.time()) - 10},
        {"iss": "https://evil.test"},
        {"aud": "other"},
        {"preferred_username": ""},
    ],
    ids=["expired", "issuer", "audience", "no-user"],
)
async def test_bad_claims_are_refused(
    client: httpx.AsyncClient, keys: tuple[Any, Any], claims: dict[str, Any]
) -> None:
    response = await caps(client, token(keys[0], **claims))
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"


async def test_wrong_key_and_unsigned_tokens_are_refused(
    client: httpx.AsyncClient, keys: tuple[Any, Any]
) -> None:
    assert (await caps(client, token(keys[1]))).status_code == 401
    unsigned = jwt.encode(
        {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "exp": int(time.time()) + 60,
            "preferred_username": "carol",
        },
        None,
        algorithm="none",
        headers={"kid": "k1"},
    )
    assert (await caps(client, unsigned)).status_code == 401


async def test_projects_come_from_the_token(
    client: httpx.AsyncClient, keys: tuple[Any, Any]
) -> None:
    headers = {"Authorization": f"Bearer {token(keys[0])}"}
    job = {"executable": "/bin/true"}
    allowed = await client.post(
        "/api/v2/compute/job/local", json=job, headers={**headers, "X-IRI-Facility-Project": "p2"}
    )
    assert allowed.status_code == 200, allowed.text
    refused = await client.post(
        "/api/v2/compute/job/local", json=job, headers={**headers, "X-IRI-Facility-Project": "p3"}
    )
    assert refused.status_code == 403


def test_jwt_mode_needs_its_settings(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="jwks_url"):
        Settings(data_dir=tmp_path, auth="jwt")
