"""The lean request path (issue 25): work done once that was done on every request, and
documents a view does not show left undecoded. No timing: what is counted is work done."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.api.compute import routes as compute
from iri_gateway.api.plumbing import deps
from iri_gateway.service.operations import store as store_module

pytestmark = pytest.mark.anyio

JOB = {"executable": "/bin/true", "attributes": {"account": "proj1", "duration": 60}}


async def test_a_routes_query_parameters_are_worked_out_once(
    client: httpx.AsyncClient, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The query checks (`single_valued_query`, `known_query`) walk a route's dependency
    tree once, not on every request; they still refuse what they refused."""
    walked: list[Any] = []
    real = deps._query_fields

    def counting(dependant: Any) -> Iterator[tuple[str, Any]]:
        walked.append(dependant)
        return real(dependant)

    monkeypatch.setattr(deps, "_query_fields", counting)
    # The route objects are the module's, shared by every app the tests build: forget what
    # an earlier test's requests worked out, so this one counts from the first request.
    for route in compute.router.routes:
        if getattr(route, "endpoint", None) is compute.get_jobs:
            monkeypatch.delattr(route, deps._ROUTE_QUERY, raising=False)
    headers = {"Authorization": f"Bearer {token}"}
    for _ in range(5):
        listed = await client.post(
            "/api/v2/compute/status/local", params={"limit": 5}, headers=headers
        )
        assert listed.status_code == 200, listed.text
    whole = [d for d in walked if getattr(d, "call", None) is compute.get_jobs]
    assert len(whole) == 1, f"the route's tree walked {len(whole)} times for 5 requests"
    twice = await client.post("/api/v2/compute/status/local?limit=1&limit=2", headers=headers)
    assert twice.status_code == 422 and "more than once" in twice.text
    unknown = await client.post("/api/v2/compute/status/local?limt=1", headers=headers)
    assert unknown.status_code == 422 and "limt" in unknown.text and "limit" in unknown.text


async def test_a_status_list_does_not_decode_the_specs_it_does_not_show(
    app: FastAPI, client: httpx.AsyncClient, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """getJobs without `include_spec` reads each job's plan, paths and history, never the
    spec as sent: its JSON stays text (`StoredJson`)."""
    headers = {"Authorization": f"Bearer {token}"}
    for _ in range(3):
        launched = await client.post("/api/v2/compute/job/local", json=JOB, headers=headers)
        assert launched.status_code == 200, launched.text
    app.state.engine.store._cache.written_all()  # read from the database, as on PostgreSQL
    decoded: list[str] = []
    real = store_module.StoredJson.get

    def watching(self: store_module.StoredJson, name: str) -> Any:
        decoded.append(name)
        return real(self, name)

    monkeypatch.setattr(store_module.StoredJson, "get", watching)
    listed = await client.post(
        "/api/v2/compute/status/local", params={"historical": "true"}, headers=headers
    )
    assert listed.status_code == 200 and len(listed.json()) == 3
    assert "plan" in decoded and "spec" not in decoded
    shown = await client.post(
        "/api/v2/compute/status/local",
        params={"historical": "true", "include_spec": "true"},
        headers=headers,
    )
    assert all(job["job_spec"]["executable"] == "/bin/true" for job in shown.json())
