"""Token classes (issue 31): a token that may only read is refused every operation that
changes (all of them, as our OpenAPI marks them `x-iri-gateway-access: write`) before its
body is read, and serves every one that only reads; tokens carry an expiry and the networks
they may be used from; the site bounds each class's life and networks; a JWT may only read
when it lacks the write scope the gateway names.

The client of these requests is 127.0.0.1 (httpx's ASGI transport); the port proxy's own
refusal of a read token is in tests/api/test_port_proxy_local.py.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.api.app import create_app
from iri_gateway.service.operations.settings import Settings
from tests.api.test_jwt_auth import AUDIENCE, ISSUER
from tests.api.test_jwt_auth import token as signed
from tests.api.test_tokens import bearer, cli

pytestmark = pytest.mark.anyio

ME = "/api/v2/account/me"
CAPS = "/api/v2/compute/capabilities/local"
LAUNCH = "/api/v2/compute/job/local"
SPEC = {"executable": "/bin/true"}


def operations(app: FastAPI, access: str) -> list[tuple[str, str, str]]:
    """(method, path with its parameters filled, operationId) of every operation our
    OpenAPI marks `access`."""
    found = []
    for path, item in app.openapi()["paths"].items():
        for method, operation in item.items():
            if isinstance(operation, dict) and operation.get("x-iri-gateway-access") == access:
                filled = re.sub(r"\{[^}]+\}", "x", path)
                found.append((method.upper(), filled, operation["operationId"]))
    return sorted(found)


def test_every_operation_says_which_token_class_it_needs(app: FastAPI) -> None:
    document = app.openapi()
    for item in document["paths"].values():
        for method, operation in item.items():
            if not isinstance(operation, dict) or "401" not in operation.get("responses", {}):
                continue  # public: no token at all
            access = operation.get("x-iri-gateway-access")
            assert access in ("read", "write"), operation["operationId"]
            if access == "write":
                assert "403" in operation["responses"], operation["operationId"]
            if method == "get":
                assert access == "read", operation["operationId"]
    writes = {op for _, _, op in operations(app, "write")}
    assert {"launchJob", "cancelJob", "rm", "upload", "openJobPort", "deleteTask"} <= writes
    assert not writes & {"ls", "stat", "getJobs", "planJob", "tail", "getJob"}


async def test_a_read_only_token_is_refused_every_operation_that_changes(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    reader = app.state.tokens.issue("alice", ["proj1"], access="read")
    writes = operations(app, "write")
    assert len(writes) >= 24
    for method, path, operation_id in writes:
        # A body that is not even JSON: the refusal comes before the body is read.
        answer = await client.request(
            method, path, content=b"{not json", headers=bearer(reader, "proj1")
        )
        assert answer.status_code == 403, (operation_id, answer.status_code, answer.text)
        detail = answer.json()["detail"]
        assert "may only read" in detail and "--read-only" in detail, (operation_id, detail)


async def test_a_read_only_token_serves_every_operation_that_only_reads(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    reader = app.state.tokens.issue("alice", ["proj1"], access="read")
    reads = operations(app, "read")
    assert len(reads) >= 40
    for method, path, operation_id in reads:
        if operation_id == "getJobEvents":
            continue  # a stream that does not end: its class is checked by the list above
        answer = await client.request(
            method, path, json={}, headers=bearer(reader, "proj1"), timeout=30
        )
        refused = answer.status_code == 403 and "may only read" in answer.text
        assert not refused, (operation_id, answer.text)
    me = await client.get(ME, headers=bearer(reader))
    assert me.status_code == 200, me.text
    assert (me.json()["user"], me.json()["access"]) == ("alice", "read")


async def test_a_token_that_may_change_launches(client: httpx.AsyncClient, app: FastAPI) -> None:
    writer = app.state.tokens.issue("alice", ["proj1"])
    answer = await client.post(LAUNCH, json=SPEC, headers=bearer(writer, "proj1"))
    assert answer.status_code == 200, answer.text


async def test_an_expired_token_is_refused_at_once(client: httpx.AsyncClient, app: FastAPI) -> None:
    brief = app.state.tokens.issue("alice", ["proj1"], lifetime=0.5)
    me = (await client.get(ME, headers=bearer(brief))).json()
    assert me["access"] == "write" and me["expires"] is not None
    time.sleep(0.6)
    answer = await client.get(CAPS, headers=bearer(brief))
    assert answer.status_code == 401 and "expired" in answer.json()["detail"], answer.text


async def test_a_token_is_used_only_from_its_networks(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    elsewhere = app.state.tokens.issue("alice", ["proj1"], networks=["10.0.0.0/8"])
    here = app.state.tokens.issue("alice", ["proj1"], networks=["127.0.0.0/8", "10.0.0.0/8"])
    refused = await client.get(CAPS, headers=bearer(elsewhere))
    assert refused.status_code == 401, refused.text
    assert "may not be used from 127.0.0.1" in refused.json()["detail"]
    assert "10.0.0.0" not in refused.text  # the allowed networks are not told
    assert (await client.get(CAPS, headers=bearer(here))).status_code == 200


def site(tmp_path: Path, **settings: Any) -> FastAPI:
    return create_app(Settings(data_dir=tmp_path, **settings), run_poller=False)


async def test_the_site_bounds_each_class(tmp_path: Path) -> None:
    app = site(
        tmp_path,
        write_token_networks=["10.0.0.0/8"],
        read_token_lifetime=3600,
    )
    writer = app.state.tokens.issue("alice", ["proj1"])
    reader = app.state.tokens.issue("alice", ["proj1"], access="read")
    longer = app.state.tokens.issue("alice", ["proj1"], access="read", lifetime=7200)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as client:
        refused = await client.get(CAPS, headers=bearer(writer))
        assert refused.status_code == 401 and "the site's limit" in refused.json()["detail"]
        assert (await client.get(CAPS, headers=bearer(reader))).status_code == 200
        too_long = await client.get(CAPS, headers=bearer(longer))
        assert too_long.status_code == 401, too_long.text
        assert "lives longer than this site allows a read token" in too_long.text
    app.state.engine.close()


def test_the_token_command_keeps_to_the_site_and_says_when_a_token_ends(tmp_path: Path) -> None:
    env_dir = ["--data-dir", str(tmp_path)]
    made = cli(
        "token", "alice", "--read-only", "--expires-in", "10m", "--from", "10.1.2.3/8", *env_dir
    )
    assert made.returncode == 0, made.stderr
    assert "expires at" in made.stderr
    listed = cli("token", "list", "--json", *env_dir)
    (entry,) = json.loads(listed.stdout)
    assert entry["access"] == "read" and entry["networks"] == ["10.0.0.0/8"]
    assert 590 < entry["expires"] - entry["created"] <= 600
    bad = cli("token", "alice", "--expires-in", "soon", *env_dir)
    assert bad.returncode != 0 and "--expires-in" in bad.stderr and "10m" in bad.stderr
    bad = cli("token", "alice", "--from", "somewhere", *env_dir)
    assert bad.returncode != 0 and "not a network" in bad.stderr


@pytest.fixture
async def jwt_client(jwks_url: str, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = site(
        tmp_path,
        auth="jwt",
        jwks_url=jwks_url,
        jwt_issuer=ISSUER,
        jwt_audience=AUDIENCE,
        jwt_username_claim="preferred_username",
        jwt_write_scope="compute:write",
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as client:
        yield client
    app.state.engine.close()


async def test_a_jwt_without_the_write_scope_may_only_read(
    jwt_client: httpx.AsyncClient,
    keys: tuple[Any, Any],
) -> None:
    reader = signed(keys[0], scope="openid compute:read")
    writer = signed(keys[0], scope="openid compute:write")
    assert (await jwt_client.get(CAPS, headers=bearer(reader))).status_code == 200
    refused = await jwt_client.post(LAUNCH, json=SPEC, headers=bearer(reader, "p1"))
    assert refused.status_code == 403, refused.text
    assert "'scope' claim lacks 'compute:write'" in refused.json()["detail"]
    allowed = await jwt_client.post(LAUNCH, json=SPEC, headers=bearer(writer, "p1"))
    assert allowed.status_code != 403, allowed.text
