"""The compute API over HTTP (ASGI): auth, projects, idempotency, isolation, extensions.

The app and client fixtures come from tests/api/conftest.py.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

pytestmark = pytest.mark.anyio
JOB: dict[str, Any] = {"executable": "/bin/sh", "arguments": ["-c", "echo hi"]}
PROJECT = {"X-IRI-Facility-Project": "proj1"}


def bearer(app: FastAPI, user: str, projects: list[str] | None = None) -> dict[str, str]:
    return {"Authorization": f"Bearer {app.state.tokens.issue(user, projects or ['proj1'])}"}


async def launch(
    client: httpx.AsyncClient, headers: dict[str, str], body: dict[str, Any] = JOB, **extra: str
) -> httpx.Response:
    return await client.post(
        "/api/v2/compute/job/local", json=body, headers={**headers, **PROJECT, **extra}
    )


def problem_of(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"] == "application/problem+json", response.text
    body: dict[str, Any] = response.json()
    assert body["status"] == response.status_code and body["instance"].startswith("http")
    return body


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/api/v2/compute/job/local"),
        ("GET", "/api/v2/compute/status/local/x"),
        ("POST", "/api/v2/compute/status/local"),
        ("DELETE", "/api/v2/compute/cancel/local/x"),
        ("PUT", "/api/v2/compute/job/local/x"),
        ("POST", "/api/v2/compute/restart/local/x"),
        ("GET", "/api/v2/compute/capabilities/local"),
        ("POST", "/api/v2/compute/plan/local"),
        ("POST", "/api/v2/compute/placement"),
    ],
)
@pytest.mark.parametrize("token", [None, "not-a-token"])
async def test_compute_needs_a_valid_token(
    client: httpx.AsyncClient, method: str, path: str, token: str | None
) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = await client.request(method, path, json=JOB, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    problem_of(response)


async def test_launch_then_get(app: FastAPI, client: httpx.AsyncClient) -> None:
    alice = bearer(app, "alice")
    response = await launch(client, alice)
    assert response.status_code == 200, response.text
    job = response.json()
    assert job["status"]["state"] == "queued"
    assert job["job_spec"]["attributes"]["account"] == "proj1"
    got = await client.get(f"/api/v2/compute/status/local/{job['id']}", headers=alice)
    assert got.status_code == 200 and got.json()["id"] == job["id"]
    assert "job_spec" not in got.json(), "include_spec defaults to false"
    deadline = time.monotonic() + 20
    while app.state.engine.store.get(job["id"]).state.value != "completed":
        assert time.monotonic() < deadline
        app.state.engine.refresh("local")
        time.sleep(0.05)
    done = await client.get(
        f"/api/v2/compute/status/local/{job['id']}?include_spec=true", headers=alice
    )
    assert done.json()["status"]["state"] == "completed"
    assert done.json()["status"]["exit_code"] == 0
    assert done.json()["job_spec"]["executable"] == "/bin/sh"


async def test_project_must_be_given_exactly_once(app: FastAPI, client: httpx.AsyncClient) -> None:
    alice = bearer(app, "alice")
    neither = await client.post("/api/v2/compute/job/local", json=JOB, headers=alice)
    assert neither.status_code == 400
    assert problem_of(neither)["invalid_params"][0]["name"] == "attributes.account"
    both = await launch(client, alice, {**JOB, "attributes": {"account": "proj1"}})
    assert both.status_code == 400
    in_spec = await client.post(
        "/api/v2/compute/job/local", headers=alice, json={**JOB, "attributes": {"account": "proj1"}}
    )
    assert in_spec.status_code == 200
    foreign = await client.post(
        "/api/v2/compute/job/local", headers=alice, json={**JOB, "attributes": {"account": "other"}}
    )
    assert foreign.status_code == 403


async def test_idempotency_key_semantics(app: FastAPI, client: httpx.AsyncClient) -> None:
    alice = bearer(app, "alice")
    first = await launch(client, alice, **{"Idempotency-Key": "k-1"})
    again = await launch(client, alice, **{"Idempotency-Key": "k-1"})
    assert first.headers["idempotency-key-reply"] == "miss"
    assert again.headers["idempotency-key-reply"] == "hit"
    assert first.json()["id"] == again.json()["id"]
    changed = await launch(
        client, alice, {**JOB, "arguments": ["-c", "echo other"]}, **{"Idempotency-Key": "k-1"}
    )
    assert changed.status_code == 422
    assert "different request" in problem_of(changed)["detail"]
    assert len(app.state.engine.store.find(owner="alice")) == 1, "nothing submitted twice"


async def test_same_idempotency_key_at_once_makes_one_job(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """Requests racing with one key all get the one job (issue 13): the key is unique in the
    store, so the loser of the race replays the winner's job; none gets a 409 conflict (a
    retry while the first request still waits is no conflict)."""
    alice = bearer(app, "alice")
    answers = await asyncio.gather(
        *(launch(client, alice, **{"Idempotency-Key": "k-2"}) for _ in range(8))
    )
    assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1
    assert sorted(a.headers["idempotency-key-reply"] for a in answers) == ["hit"] * 7 + ["miss"]
    assert len(app.state.engine.store.find(owner="alice")) == 1, "nothing submitted twice"


async def test_an_idempotency_key_belongs_to_its_user(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """Bob sending Alice's key gets a job of his own, never hers (nor a conflict)."""
    alice, bob = bearer(app, "alice"), bearer(app, "bob")
    hers = await launch(client, alice, **{"Idempotency-Key": "shared"})
    his = await launch(
        client, bob, {**JOB, "arguments": ["-c", "echo bob"]}, **{"Idempotency-Key": "shared"}
    )
    assert hers.status_code == his.status_code == 200, his.text
    assert his.headers["idempotency-key-reply"] == "miss"
    assert his.json()["id"] != hers.json()["id"]
    assert [r.owner for r in app.state.engine.store.find()] == ["alice", "bob"]


async def test_other_users_jobs_are_not_found(app: FastAPI, client: httpx.AsyncClient) -> None:
    alice, bob = bearer(app, "alice"), bearer(app, "bob")
    job_id = (await launch(client, alice)).json()["id"]
    for method, path, body in [
        ("GET", f"/api/v2/compute/status/local/{job_id}", None),
        ("DELETE", f"/api/v2/compute/cancel/local/{job_id}", None),
        ("PUT", f"/api/v2/compute/job/local/{job_id}", {**JOB, "name": "x"}),
        ("POST", f"/api/v2/compute/restart/local/{job_id}", None),
    ]:
        response = await client.request(method, path, json=body, headers={**bob, **PROJECT})
        assert response.status_code == 404, (method, response.text)
        problem_of(response)
    listed = await client.post("/api/v2/compute/status/local?historical=true", headers=bob)
    assert listed.json() == []
    mine = await client.post("/api/v2/compute/status/local?historical=true", headers=alice)
    assert [job["id"] for job in mine.json()] == [job_id]


async def test_wrong_resource_in_path_is_not_found(app: FastAPI, client: httpx.AsyncClient) -> None:
    alice = bearer(app, "alice")
    job_id = (await launch(client, alice)).json()["id"]
    response = await client.get(f"/api/v2/compute/status/elsewhere/{job_id}", headers=alice)
    assert response.status_code == 404
    unknown = await client.post(
        "/api/v2/compute/job/elsewhere", json=JOB, headers={**alice, **PROJECT}
    )
    assert unknown.status_code == 404
    assert "known: local" in problem_of(unknown)["detail"]


async def test_invalid_jobspec_lists_every_field(app: FastAPI, client: httpx.AsyncClient) -> None:
    alice = bearer(app, "alice")
    response = await launch(
        client, alice, {"executable": "x", "resources": {"node_count": 0}, "roles": []}
    )
    assert response.status_code == 422
    names = {p["name"] for p in problem_of(response)["invalid_params"]}
    assert names == {"resources.node_count", "roles"}


async def test_job_that_cannot_run_is_422_with_every_problem(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    alice = bearer(app, "alice")
    body = {
        "executable": "/bin/true",
        "environment": {"1X": "y"},
        "resources": {"node_count": 2, "gpu_cores_per_process": 1},
    }
    for path in ("/api/v2/compute/job/local", "/api/v2/compute/plan/local"):
        response = await client.post(path, json=body, headers={**alice, **PROJECT})
        assert response.status_code == 422
        names = {p["name"] for p in problem_of(response)["invalid_params"]}
        assert names >= {
            "environment.1X",
            "resources.node_count",
            "resources.gpu_cores_per_process",
        }
    assert app.state.engine.store.find() == [], "a refused job is not recorded"


async def test_container_fields_unknown_or_twice_are_422(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    alice = bearer(app, "alice")
    image = "docker.io/library/busybox:1.36"
    typo = {"executable": "/bin/true", "container": {"image": image, "netwrk": "none"}}
    twice = {
        "executable": "/bin/true",
        "container_runtime": {"image": image, "network": "none", "network_mode": "none"},
    }
    for body, name, words in (
        (typo, "container.netwrk", "did you mean 'network'?"),
        (twice, "container_runtime", "'network_mode' is an alias"),
    ):
        for path in ("/api/v2/compute/job/local", "/api/v2/compute/plan/local"):
            response = await client.post(path, json=body, headers={**alice, **PROJECT})
            assert response.status_code == 422, response.text
            (param,) = problem_of(response)["invalid_params"]
            assert param["name"] == name and words in param["reason"], param
    assert app.state.engine.store.find() == [], "a refused job is not recorded"


async def test_plan_capabilities_placement(app: FastAPI, client: httpx.AsyncClient) -> None:
    alice = bearer(app, "alice")
    plan = await client.post("/api/v2/compute/plan/local", json=JOB, headers=alice)
    assert plan.status_code == 200
    assert plan.json()["script"].startswith("#!/bin/bash\n")
    caps = await client.get("/api/v2/compute/capabilities/local", headers=alice)
    assert caps.json()["hardware"]["node_count"] == 1
    placement = await client.post("/api/v2/compute/placement", json=JOB, headers=alice)
    assert placement.json() == [
        {
            "resource": "local",
            "facility": "local",
            "runnable": True,
            "app": None,
            "flavour": None,
            "priority": None,
            "runtime": "none",
            "queue": "local",
            "image": None,
            "flavours": [],
            "role_flavours": {},
            "warnings": [],
            "problems": [],
        }
    ]


async def test_cancel_and_update(app: FastAPI, client: httpx.AsyncClient) -> None:
    alice = bearer(app, "alice")
    job_id = (
        await launch(client, alice, {"executable": "/bin/sleep", "arguments": ["30"]})
    ).json()["id"]
    update = await client.put(
        f"/api/v2/compute/job/local/{job_id}",
        json={"executable": "/bin/sleep", "name": "renamed"},
        headers={**alice, **PROJECT},
    )
    assert update.status_code in (409, 422), "local jobs start at once; not changeable"
    problem_of(update)
    cancel = await client.delete(f"/api/v2/compute/cancel/local/{job_id}", headers=alice)
    assert cancel.status_code == 204
    deadline = time.monotonic() + 20
    while not app.state.engine.store.get(job_id).state.final:
        assert time.monotonic() < deadline
        app.state.engine.refresh("local")
        time.sleep(0.05)
    assert app.state.engine.store.get(job_id).state.value == "canceled"


async def test_restart_of_a_job_the_scheduler_never_had_is_a_conflict(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    alice = bearer(app, "alice")
    record = app.state.engine.store.create(
        owner="alice", resource_id="local", spec={}, effective_spec={}, plan={}, script="true"
    )
    response = await client.post(f"/api/v2/compute/restart/local/{record.id}", headers=alice)
    assert response.status_code == 409
    assert "has not reached the scheduler" in problem_of(response)["detail"]


def test_restart_is_documented_under_compute_with_its_statuses(app: FastAPI) -> None:
    operation = app.openapi()["paths"]["/api/v2/compute/restart/{resource_id}/{job_id}"]["post"]
    assert operation["operationId"] == "restartJob"
    assert operation["tags"] == ["compute", "extensions"]
    assert {"200", "404", "409", "503"} <= set(operation["responses"])


FLAVOURED: dict[str, Any] = {
    "executable": "/bin/sh",
    "arguments": ["-c", "echo hi"],
    "container": {
        "flavours": [
            {
                "name": "cuda",
                "image": "docker.io/lab/app:cuda",
                "priority": 100,
                "requirements": [{"gpu_count": ">= 2"}, {"nvidia_cuda": "> 11"}],
            },
            {
                "name": "bare",
                "image": "docker.io/lab/app:cpu",
                "priority": 1,
                "runtime": "none",
                "requirements": {"gpu_count": "== 0"},
            },
        ]
    },
}


async def test_flavours_over_http(app: FastAPI, client: httpx.AsyncClient) -> None:
    alice = bearer(app, "alice")
    plan = (await client.post("/api/v2/compute/plan/local", json=FLAVOURED, headers=alice)).json()
    assert plan["flavour"] == "bare"
    assert plan["flavours"][0] == {
        "name": "cuda",
        "priority": 100,
        "status": "rejected",
        "reason": "gpu_count >= 2: local has gpu_count 0",
    }
    placed = (await client.post("/api/v2/compute/placement", json=FLAVOURED, headers=alice)).json()
    assert [(p["resource"], p["flavour"], p["priority"]) for p in placed] == [("local", "bare", 1)]
    # The job record names the flavour it ran with.
    job_id = (await launch(client, alice, FLAVOURED)).json()["id"]
    job = (await client.get(f"/api/v2/compute/status/local/{job_id}", headers=alice)).json()
    assert job["attributes"]["flavour"] == "bare"
    assert [f["status"] for f in job["attributes"]["flavours"]] == ["rejected", "chosen"]
    # A malformed requirement is a 422 naming the flavour and the fact.
    broken = {
        **FLAVOURED,
        "container": {
            "flavours": [
                {"name": "cuda", "image": "x", "requirements": {"nvidia_cuda": "> eleven"}}
            ]
        },
    }
    refused = await client.post("/api/v2/compute/placement", json=broken, headers=alice)
    assert refused.status_code == 422
    params = problem_of(refused)["invalid_params"]
    assert [p["name"] for p in params] == ["container.flavours[0].requirements"]
    assert "nvidia_cuda is a version; 'eleven' is not a version" in params[0]["reason"]


async def test_app_and_unknown_facts_over_http(app: FastAPI, client: httpx.AsyncClient) -> None:
    alice = bearer(app, "alice")
    named = {
        **FLAVOURED,
        "container": {**FLAVOURED["container"], "app": {"name": "segmentor", "version": "0.4.3"}},
    }
    segmentor = {"name": "segmentor", "version": "0.4.3"}
    plan = (await client.post("/api/v2/compute/plan/local", json=named, headers=alice)).json()
    assert plan["app"] == segmentor
    placed = (await client.post("/api/v2/compute/placement", json=named, headers=alice)).json()
    assert [p["app"] for p in placed] == [segmentor]
    job_id = (await launch(client, alice, named)).json()["id"]
    job = (await client.get(f"/api/v2/compute/status/local/{job_id}", headers=alice)).json()
    assert job["attributes"]["app"] == segmentor
    # A requirement naming a fact no resource defines is a 422 with the closest names, at
    # placement and at launch alike.
    typo = {
        **FLAVOURED,
        "container": {
            "flavours": [{"name": "cuda", "image": "x", "requirements": {"gpu_cnt": ">= 2"}}]
        },
    }
    for refused in (
        await client.post("/api/v2/compute/placement", json=typo, headers=alice),
        await launch(client, alice, typo),
    ):
        assert refused.status_code == 422
        params = problem_of(refused)["invalid_params"]
        assert [p["name"] for p in params] == ["container.flavours[0].requirements.gpu_cnt"]
        assert params[0]["reason"] == (
            "flavour 'cuda': no loaded resource defines the fact 'gpu_cnt'; the closest known "
            "facts are offered (offered: gpu_count)"
        )


async def test_the_name_filter_applies_before_paging(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    alice = bearer(app, "alice")
    ids = {}
    for name in ("first", "other", "second-other", "first"):
        body = {"executable": "/bin/true", "name": name}
        ids.setdefault(name, []).append((await launch(client, alice, body)).json()["id"])
    listed = await client.post(
        "/api/v2/compute/status/local",
        params={"historical": "true", "limit": "2"},
        json={"name": "first"},
        headers=alice,
    )
    assert listed.status_code == 200, listed.text
    assert [job["id"] for job in listed.json()] == ids["first"], (
        "both matching jobs, though other jobs came between them"
    )
