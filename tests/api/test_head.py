"""HEAD on every GET route answers as GET would, without the body (RFC 9110 section 9.3.2);
it was a 405."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("path", ["/api/v2/facility", "/api/v2/status/resources", "/health"])
async def test_head_answers_like_get_without_a_body(client: httpx.AsyncClient, path: str) -> None:
    got = await client.get(path)
    head = await client.head(path)
    assert (head.status_code, head.content) == (200, b"")
    assert head.headers["content-type"] == got.headers["content-type"]
    assert head.headers["content-length"] == str(len(got.content))


async def test_head_on_secured_and_unknown(client: httpx.AsyncClient, token: str) -> None:
    no_token = await client.head("/api/v2/account/projects")
    assert (no_token.status_code, no_token.content) == (401, b"")
    assert no_token.headers["www-authenticate"] == "Bearer"
    bearer = {"Authorization": f"Bearer {token}"}
    assert (await client.head("/api/v2/account/projects", headers=bearer)).status_code == 200
    unknown = await client.head("/api/v2/compute/status/local/no-such-job", headers=bearer)
    assert (unknown.status_code, unknown.content) == (404, b"")


async def test_head_where_no_get_is_served_is_405(client: httpx.AsyncClient, app: FastAPI) -> None:
    answer = await client.head("/api/v2/compute/placement")
    assert answer.status_code == 405
    assert answer.headers["allow"] == "POST"
    task = await client.request("OPTIONS", "/api/v2/task/x")
    assert task.headers["allow"] == "GET, HEAD, DELETE"
