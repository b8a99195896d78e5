"""Webhook subscriptions and the notify secret over the API (in process): secrets shown once,
another user never sees or touches them (404, not 403), hostile URLs refused with 400 naming
the field and the reason, the per-user bound, a job's `notify` checked at launch."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.api.app import create_app
from iri_gateway.service.operations.settings import Settings

pytestmark = pytest.mark.anyio

PUBLIC = "https://93.184.215.14/hooks/iri"
"""A public address written as one: no DNS needed to judge it."""


@pytest.fixture
def app(tmp_path: Path) -> Iterator[FastAPI]:
    built = create_app(
        Settings(data_dir=tmp_path, webhook_subscriptions_per_user=3), run_poller=False
    )
    yield built
    built.state.engine.close()


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


def auth(app: FastAPI, user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {app.state.tokens.issue(user, ['proj1'])}"}


BASE = "/api/v2/compute"


async def test_subscriptions_are_their_owners_only(app: FastAPI, client: httpx.AsyncClient) -> None:
    alice, bob = auth(app, "alice"), auth(app, "bob")
    made = await client.post(
        f"{BASE}/subscriptions", json={"url": PUBLIC, "events": ["queued"]}, headers=alice
    )
    assert made.status_code == 201, made.text
    body = made.json()
    assert len(body["secret"]) >= 40 and body["events"] == ["queued"]
    sid = body["id"]
    listed = (await client.get(f"{BASE}/subscriptions", headers=alice)).json()
    assert [s["id"] for s in listed] == [sid] and "secret" not in listed[0]
    one = (await client.get(f"{BASE}/subscriptions/{sid}", headers=alice)).json()
    assert "secret" not in one and one["url"] == PUBLIC
    # bob: nothing to see, nothing to touch, and not told it exists
    assert (await client.get(f"{BASE}/subscriptions", headers=bob)).json() == []
    for method, path in [
        ("GET", f"/subscriptions/{sid}"),
        ("GET", f"/subscriptions/{sid}/deliveries"),
        ("DELETE", f"/subscriptions/{sid}"),
    ]:
        answer = await client.request(method, BASE + path, headers=bob)
        assert answer.status_code == 404, (method, path, answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
    assert (await client.get(f"{BASE}/subscriptions/{sid}", headers=alice)).status_code == 200
    assert (await client.get(f"{BASE}/subscriptions/{sid}/deliveries", headers=alice)).json() == []
    assert (await client.delete(f"{BASE}/subscriptions/{sid}", headers=alice)).status_code == 204
    assert (await client.get(f"{BASE}/subscriptions/{sid}", headers=alice)).status_code == 404


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://127.0.0.1/x", "loopback"),
        ("https://[::1]/x", "loopback"),
        ("https://169.254.169.254/latest", "link-local"),
        ("https://10.0.0.8/x", "private"),
        ("https://[::ffff:127.0.0.1]/x", "loopback"),
        ("https://2130706433/x", "non-standard form"),
        ("https://0177.0.0.1/x", "non-standard form"),
        ("https://localhost/x", "loopback"),
        ("http://93.184.215.14/x", "plain http:// is not allowed"),
    ],
)
async def test_hostile_urls_are_400_naming_the_field(
    app: FastAPI, client: httpx.AsyncClient, url: str, reason: str
) -> None:
    answer = await client.post(f"{BASE}/subscriptions", json={"url": url}, headers=auth(app, "a"))
    assert answer.status_code == 400, answer.text
    (param,) = answer.json()["invalid_params"]
    assert param["name"] == "url" and reason in param["reason"], param


async def test_bad_bodies_are_422_and_the_bound_is_409(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    alice = auth(app, "alice")
    typo = await client.post(
        f"{BASE}/subscriptions", json={"url": PUBLIC, "event": ["queued"]}, headers=alice
    )
    assert typo.status_code == 422 and "did you mean 'events'" in typo.text
    unknown = await client.post(
        f"{BASE}/subscriptions", json={"url": PUBLIC, "resource_id": "nope"}, headers=alice
    )
    assert unknown.status_code == 404 and "known: local" in unknown.text
    for _ in range(3):
        made = await client.post(f"{BASE}/subscriptions", json={"url": PUBLIC}, headers=alice)
        assert made.status_code == 201
    over = await client.post(f"{BASE}/subscriptions", json={"url": PUBLIC}, headers=alice)
    assert over.status_code == 409 and "webhook_subscriptions_per_user = 3" in over.text
    # bob has his own bound
    bob = await client.post(f"{BASE}/subscriptions", json={"url": PUBLIC}, headers=auth(app, "b"))
    assert bob.status_code == 201


def job(notify: dict[str, Any]) -> dict[str, Any]:
    return {"executable": "/bin/true", "attributes": {"account": "proj1"}, "notify": notify}


async def test_a_jobs_notify_needs_a_secret_and_an_allowed_url(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    alice = auth(app, "alice")
    state = (await client.get(f"{BASE}/notify-secret", headers=alice)).json()
    assert state == {"exists": False, "created_at": None}
    refused = await client.post(f"{BASE}/job/local", json=job({"url": PUBLIC}), headers=alice)
    assert refused.status_code == 400, refused.text
    assert refused.json()["invalid_params"][0]["name"] == "notify"
    assert "POST /api/v2/compute/notify-secret" in refused.text
    made = await client.post(f"{BASE}/notify-secret", headers=alice)
    assert made.status_code == 201 and len(made.json()["secret"]) >= 40
    state = (await client.get(f"{BASE}/notify-secret", headers=alice)).json()
    assert state["exists"] is True and "secret" not in state
    hostile = await client.post(
        f"{BASE}/job/local", json=job({"url": "https://169.254.169.254/"}), headers=alice
    )
    assert hostile.status_code == 400
    assert hostile.json()["invalid_params"][0]["name"] == "notify.url"
    launched = await client.post(f"{BASE}/job/local", json=job({"url": PUBLIC}), headers=alice)
    assert launched.status_code == 200, launched.text
    job_id = launched.json()["id"]
    mine = await client.get(f"{BASE}/job/local/{job_id}/deliveries", headers=alice)
    assert mine.status_code == 200 and mine.json() == []
    theirs = await client.get(f"{BASE}/job/local/{job_id}/deliveries", headers=auth(app, "b"))
    assert theirs.status_code == 404
