"""Bulk launch over HTTP (issue 30, part 3): `POST /compute/jobs/{resource}` on `local`.

One result per spec, in order, each a job or a problem with its index and its fields named
below it; an invalid spec never fails the call. Each spec's own idempotency (the request's
key and the index): a retry makes nothing new, two racing identical calls make each job
once. Another user sees none of the jobs. The bound (`bulk_max_specs`) and the body limit
refuse the whole call, clearly, never with a 500. The quota and the write rate count every
spec. The app and client fixtures come from tests/api/conftest.py (no poller: the jobs stay
`queued` in the store, so they count as unfinished).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.api.app import create_app
from iri_gateway.service.jobs.bulk import spec_key
from iri_gateway.service.operations.settings import Settings
from tests.api.test_webhooks_http import PUBLIC

pytestmark = pytest.mark.anyio
BULK = "/api/v2/compute/jobs/local"
JOB: dict[str, Any] = {"executable": "/bin/true"}


def bearer(app: FastAPI, user: str) -> dict[str, str]:
    token = app.state.tokens.issue(user, ["proj1"])
    return {"Authorization": f"Bearer {token}", "X-IRI-Facility-Project": "proj1"}


def mixed(count: int) -> tuple[list[Any], dict[int, str]]:
    """`count` specs, every tenth valid (each its own name), the others invalid in turn in
    one of four ways; and the field each invalid one is refused for, by index."""
    specs: list[Any] = []
    fields: dict[int, str] = {}
    for index in range(count):
        if index % 10 == 0:
            specs.append({**JOB, "name": f"sweep-{index}"})
            continue
        kind = index % 4
        if kind == 0:
            specs.append({**JOB, "resources": {"node_count": 0}})
            fields[index] = f"[{index}].resources.node_count"
        elif kind == 1:
            specs.append({**JOB, "unknown_field": 1})
            fields[index] = f"[{index}].unknown_field"
        elif kind == 2:
            specs.append("not a JobSpec")
            fields[index] = f"[{index}]"
        else:
            specs.append({"arguments": ["no executable"]})
            fields[index] = f"[{index}].executable"
    return specs, fields


def results(answer: httpx.Response) -> list[dict[str, Any]]:
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/json"
    body: list[dict[str, Any]] = answer.json()
    return body


def job_ids(body: list[dict[str, Any]]) -> dict[int, str]:
    return {r["index"]: r["job"]["id"] for r in body if r["status"] in (200, 201)}


async def test_mixed_specs_answer_per_index_in_order_with_field_paths(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    specs, fields = mixed(200)
    body = results(await client.post(BULK, json=specs, headers=bearer(app, "alice")))
    assert [r["index"] for r in body] == list(range(200))
    for result in body:
        index = result["index"]
        if index in fields:
            problem = result["problem"]
            assert result["status"] == problem["status"] == 422, result
            assert problem["index"] == index and problem["title"] == "Unprocessable Entity"
            assert problem["instance"].endswith(BULK)
            assert [p["name"] for p in problem["invalid_params"]] == [fields[index]], problem
            said = "cannot run on 'local'" if index % 4 == 3 else f"JobSpec at index {index}"
            assert said in problem["detail"] and "job" not in result, problem
        else:
            assert result["status"] == 201, result
            job = result["job"]
            assert job["status"]["state"] == "queued", job
            assert job["job_spec"]["name"] == f"sweep-{index}"
            assert job["job_spec"]["attributes"]["account"] == "proj1"
    stored = app.state.engine.store.find(owner="alice")
    assert sorted(r.spec["name"] for r in stored) == sorted(f"sweep-{i}" for i in range(0, 200, 10))


async def test_a_retry_with_the_same_key_makes_nothing_new(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    specs, fields = mixed(30)
    headers = {**bearer(app, "alice"), "Idempotency-Key": "sweep-1"}
    first = results(await client.post(BULK, json=specs, headers=headers))
    again = results(await client.post(BULK, json=specs, headers=headers))
    assert job_ids(again) == job_ids(first) and len(job_ids(first)) == 3
    assert {r["status"] for r in first if r["index"] not in fields} == {201}
    assert {r["status"] for r in again if r["index"] not in fields} == {200}
    assert {r["index"] for r in again if r["status"] == 422} == set(fields)
    store = app.state.engine.store
    assert len(store.find(owner="alice")) == 3, "nothing submitted twice"
    assert store.get(job_ids(first)[10]).idempotency_key == spec_key("sweep-1", 10) == "sweep-1#10"
    # The same key with another spec at an index: that index's 422, the others replayed.
    changed = [*specs]
    changed[10] = {**JOB, "name": "something else"}
    third = results(await client.post(BULK, json=changed, headers=headers))
    assert third[10]["status"] == 422 and third[10]["problem"]["invalid_params"] == [
        {"name": "Idempotency-Key", "reason": third[10]["problem"]["detail"]}
    ]
    assert "different request" in third[10]["problem"]["detail"]
    assert [third[i]["status"] for i in (0, 20)] == [200, 200]
    assert len(store.find(owner="alice")) == 3


async def test_two_racing_identical_calls_make_each_job_once(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    specs = [{**JOB, "name": f"race-{index}"} for index in range(40)]
    headers = {**bearer(app, "alice"), "Idempotency-Key": "race"}
    answers = await asyncio.gather(*(client.post(BULK, json=specs, headers=headers) for _ in "ab"))
    one, other = (results(answer) for answer in answers)
    assert job_ids(one) == job_ids(other) and len(job_ids(one)) == 40
    for mine, theirs in zip(one, other, strict=True):
        assert sorted((mine["status"], theirs["status"])) == [200, 201], (mine, theirs)
    assert len(app.state.engine.store.find(owner="alice")) == 40, "each job made once"


async def test_another_user_sees_none_of_the_jobs(app: FastAPI, client: httpx.AsyncClient) -> None:
    alice, bob = bearer(app, "alice"), bearer(app, "bob")
    specs = [{**JOB, "name": "hers"}] * 3
    body = results(await client.post(BULK, json=specs, headers={**alice, "Idempotency-Key": "k"}))
    for job_id in job_ids(body).values():
        seen = await client.get(f"/api/v2/compute/status/local/{job_id}", headers=bob)
        assert seen.status_code == 404, seen.text
        assert (
            await client.get(f"/api/v2/compute/status/local/{job_id}", headers=alice)
        ).is_success
    listed = await client.post("/api/v2/compute/status/local", headers=bob)
    assert listed.json() == []
    # The same key is bob's own: his own jobs, never hers replayed.
    his = results(await client.post(BULK, json=specs, headers={**bob, "Idempotency-Key": "k"}))
    assert [r["status"] for r in his] == [201] * 3
    assert set(job_ids(his).values()).isdisjoint(job_ids(body).values())


async def test_more_specs_than_the_bound_are_refused_whole(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path, bulk_max_specs=5), run_poller=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        answer = await client.post(BULK, json=[JOB] * 6, headers=bearer(app, "alice"))
        at_bound = await client.post(BULK, json=[JOB] * 5, headers=bearer(app, "alice"))
    assert answer.status_code == 413, answer.text
    problem = answer.json()
    assert answer.headers["content-type"] == "application/problem+json"
    assert "at most 5" in problem["detail"] and "bulk_max_specs" in problem["detail"]
    assert problem["invalid_params"] == [{"name": "(body)", "reason": "at most 5 JobSpecs, not 6"}]
    assert [r["status"] for r in results(at_bound)] == [201] * 5
    assert len(app.state.engine.store.find(owner="alice")) == 5
    document = app.openapi()["paths"]["/api/v2/compute/jobs/{resource_id}"]["post"]
    assert document["requestBody"]["content"]["application/json"]["schema"]["maxItems"] == 5
    app.state.engine.close()


async def test_a_10_mb_body_and_1001_tiny_specs_are_refused_clearly(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    headers = {**bearer(app, "alice"), "Content-Type": "application/json"}
    huge = json.dumps([{**JOB, "arguments": ["x" * 1024]}] * 10_000).encode()
    assert len(huge) > 10 * 1024 * 1024
    too_big = await client.post(BULK, content=huge, headers=headers)
    assert too_big.status_code == 413, too_big.text[:300]
    assert "max_request_bytes" in too_big.json()["detail"]
    too_many = await client.post(BULK, json=[{}] * 1001, headers=headers)
    assert too_many.status_code == 413, too_many.text[:300]
    assert "at most 1000" in too_many.json()["detail"]
    not_a_list = await client.post(BULK, json={"executable": "/bin/true"}, headers=headers)
    assert not_a_list.status_code == 422
    assert "JSON list of JobSpecs, not an object" in not_a_list.json()["detail"]
    assert "launchJob" in not_a_list.json()["detail"]
    empty = await client.post(BULK, json=[], headers=headers)
    assert results(empty) == []
    long_key = await client.post(
        BULK, json=[JOB], headers={**headers, "Idempotency-Key": "k" * 241}
    )
    assert long_key.status_code == 400 and "240 characters" in long_key.json()["detail"]
    assert app.state.engine.store.find(owner="alice") == [], "nothing launched"


async def test_the_quota_counts_every_spec(tmp_path: Path) -> None:
    """Room for 3 unfinished jobs: of 6 specs (one invalid), the first 3 valid ones are
    launched, the other 2 refused 429 at their index naming the quota; a retry replays the 3
    and still refuses the 2 (a replay is a read: never counted)."""
    app = create_app(Settings(data_dir=tmp_path, active_jobs_per_user=3), run_poller=False)
    specs: list[Any] = [{**JOB, "name": f"q{i}"} for i in range(6)]
    specs[1] = {**JOB, "resources": {"node_count": 0}}
    headers = {**bearer(app, "alice"), "Idempotency-Key": "quota"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        first = results(await client.post(BULK, json=specs, headers=headers))
        again = results(await client.post(BULK, json=specs, headers=headers))
    assert [r["status"] for r in first] == [201, 422, 201, 201, 429, 429]
    assert [r["status"] for r in again] == [200, 422, 200, 200, 429, 429]
    for refused in (first[4], first[5], again[5]):
        problem = refused["problem"]
        assert (problem["limit"], problem["limit_value"], problem["used"]) == (
            "active_jobs_per_user",
            3,
            3,
        )
        assert problem["retry_after"] == 30 and "(active_jobs_per_user: 3)" in problem["detail"]
    assert len(app.state.engine.store.find(owner="alice")) == 3
    app.state.engine.close()


async def test_the_write_rate_counts_every_spec(tmp_path: Path) -> None:
    """A budget of 5 writes: the call is the first, 4 more specs fit, the rest are 429 at
    their index naming `write_rate`."""
    settings = Settings(data_dir=tmp_path, write_rate=0.5, rate_window=10)
    app = create_app(settings, run_poller=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        body = results(await client.post(BULK, json=[JOB] * 8, headers=bearer(app, "alice")))
    assert [r["status"] for r in body] == [201] * 5 + [429] * 3
    problem = body[5]["problem"]
    assert problem["limit"] == "write_rate" and problem["retry_after"] >= 1, problem
    assert problem["title"] == "Too Many Requests" and problem["index"] == 5
    app.state.engine.close()


async def test_each_specs_project_and_notify_are_checked(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """The project rule and the `notify` check are launchJob's, per spec: a project the
    token does not grant (403), none at all (400), a notify without a secret (400) or to a
    refused address (400), each at its index; the others are launched."""
    token = app.state.tokens.issue("alice", ["proj1"])
    mine = {"account": "proj1"}
    specs = [
        {**JOB, "attributes": mine},
        {**JOB, "attributes": {"account": "someone-elses"}},
        JOB,
        {**JOB, "attributes": mine, "notify": {"url": PUBLIC}},
        {**JOB, "attributes": mine, "notify": {"url": "https://169.254.169.254/"}},
    ]
    body = results(
        await client.post(BULK, json=specs, headers={"Authorization": f"Bearer {token}"})
    )
    assert [r["status"] for r in body] == [201, 403, 400, 400, 400], body
    names = [r.get("problem", {}).get("invalid_params", [{}])[0].get("name") for r in body]
    assert names == [
        None,
        "[1].attributes.account",
        "[2].attributes.account",
        "[3].notify",
        "[4].notify.url",
    ]
    assert "POST /api/v2/compute/notify-secret" in body[3]["problem"]["detail"]
