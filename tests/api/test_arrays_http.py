"""Array jobs over HTTP (ASGI) on the `local` resource: launch, the array's state and
counts in getJob, pages of elements, cancels of chosen elements, and the refusals (bad
indices, another user's array, a job that is not an array). The poller is driven by hand
(`app.state.engine.refresh`), so each step sees exactly one status cycle."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.api.test_compute import bearer, launch, problem_of

pytestmark = pytest.mark.anyio
V2 = "/api/v2/compute"
ENDED = {"completed", "failed", "canceled"}


def array_job(command: str, indices: str | list[int], **array: Any) -> dict[str, Any]:
    return {
        "executable": "/bin/sh",
        "arguments": ["-c", command],
        "array": {"indices": indices, **array},
    }


async def until(
    app: FastAPI, client: httpx.AsyncClient, headers: dict[str, str], job_id: str, done: Any
) -> dict[str, Any]:
    for _ in range(400):
        app.state.engine.refresh("local")
        job: dict[str, Any] = (
            await client.get(f"{V2}/status/local/{job_id}", headers=headers)
        ).json()
        if done(job):
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(job)


async def test_an_array_shows_its_state_counts_and_elements(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    alice = bearer(app, "alice")
    answer = await launch(client, alice, array_job("exit $((IRI_ARRAY_INDEX % 2))", "1-4"))
    assert answer.status_code == 200, answer.text
    job = answer.json()
    assert job["status"]["meta_data"]["array"]["count"] == 4
    assert job["status"]["meta_data"]["stdout_path"] == "stdout-%a.txt"
    job = await until(app, client, alice, job["id"], lambda j: j["status"]["state"] == "failed")
    array = job["status"]["meta_data"]["array"]
    assert array == {
        "indices": "1-4",
        "count": 4,
        "max_concurrent": None,
        "counts": {"completed": 2, "failed": 2},
    }
    assert job["status"]["message"] == "array of 4: 2 completed, 2 failed"
    page = await client.get(
        f"{V2}/job/local/{job['id']}/elements", params={"offset": 1, "limit": 2}, headers=alice
    )
    assert page.status_code == 200, page.text
    assert page.json() == {
        "total": 4,
        "offset": 1,
        "elements": [
            {"index": 2, "state": "completed", "native_state": "EXITED", "exit_code": 0},
            {"index": 3, "state": "failed", "native_state": "EXITED", "exit_code": 1},
        ],
    }
    failed = await client.get(
        f"{V2}/job/local/{job['id']}/elements", params={"state": "failed"}, headers=alice
    )
    assert [e["index"] for e in failed.json()["elements"]] == [1, 3]
    assert failed.json()["total"] == 2


async def test_chosen_elements_are_canceled_and_the_rest_run_on(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    alice = bearer(app, "alice")
    body = array_job("sleep 0.5; exit 0", [0, 1, 2, 3], max_concurrent=1)
    job = (await launch(client, alice, body)).json()
    await until(app, client, alice, job["id"], lambda j: j["status"]["state"] == "active")
    canceled = await client.delete(
        f"{V2}/job/local/{job['id']}/elements", params={"indices": "2-3"}, headers=alice
    )
    assert canceled.status_code == 204, canceled.text
    # Between one element's end and the next's start the array is `queued` (the documented
    # rule), so wait for an end, not merely for "not active".
    job = await until(app, client, alice, job["id"], lambda j: j["status"]["state"] in ENDED)
    assert job["status"]["meta_data"]["array"]["counts"] == {"completed": 2, "canceled": 2}
    assert job["status"]["state"] == "canceled"


async def test_refusals_name_the_reason(app: FastAPI, client: httpx.AsyncClient) -> None:
    alice, bob = bearer(app, "alice"), bearer(app, "bob")
    job = (await launch(client, alice, array_job("sleep 5", "0-3"))).json()
    elements = f"{V2}/job/local/{job['id']}/elements"
    assert (await client.get(elements, headers=bob)).status_code == 404
    gone = await client.delete(elements, params={"indices": "0"}, headers=bob)
    assert gone.status_code == 404
    bad = await client.delete(elements, params={"indices": "3-1"}, headers=alice)
    assert bad.status_code == 422 and "ends before it begins" in bad.text
    outside = await client.delete(elements, params={"indices": "2-9"}, headers=alice)
    assert outside.status_code == 422
    assert problem_of(outside)["detail"] == (
        "indices: not elements of this array: 4, 5, 6, 7, 8 (its indices are 0-3)"
    )
    plain = (await launch(client, alice, {"executable": "/bin/true"})).json()
    not_array = await client.get(f"{V2}/job/local/{plain['id']}/elements", headers=alice)
    assert not_array.status_code == 409 and "not an array" in not_array.text
    throttle = await launch(client, alice, array_job("true", "0-3%2"))
    assert throttle.status_code == 422 and "max_concurrent" in throttle.text
    roles = await launch(
        client,
        alice,
        {
            **array_job("true", "0-1"),
            "roles": [{"name": "worker", "count": 1}],
            "container": {"image": "docker.io/library/alpine:3"},
        },
    )
    assert roles.status_code == 422 and "cannot be an array" in roles.text
    await client.delete(f"{V2}/cancel/local/{job['id']}", headers=alice)
