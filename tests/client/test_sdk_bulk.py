"""The SDK's bulk launch (`launch_jobs`), sync and async, against a real `iri-gateway serve`
(the `server` fixture of tests/conftest.py): one typed result per spec, in order; an invalid
spec is its own `InvalidRequest` naming its fields; the same key again replays every job."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from iri_gateway.client import (
    AsyncGatewayClient,
    GatewayClient,
    InvalidRequest,
    LaunchResult,
    TooManyRequests,
)
from iri_gateway.models.job import JobState
from iri_gateway.models.jobspec import JobSpec
from tests.conftest import Server


def specs(tag: str) -> list[Any]:
    return [
        JobSpec(executable="/bin/sh", arguments=["-c", "echo one"], name=f"{tag}-0"),
        {"executable": "/bin/true", "resources": {"node_count": 0}},
        {"executable": "/bin/sh", "arguments": ["-c", "echo three"], "name": f"{tag}-2"},
    ]


def check(results: list[LaunchResult], tag: str, *, replayed: bool) -> list[str]:
    """The three results as expected; the two job ids."""
    assert [r.index for r in results] == [0, 1, 2]
    first, invalid, last = results
    for result, name in ((first, f"{tag}-0"), (last, f"{tag}-2")):
        assert result.ok and result.error is None and result.replayed is replayed
        assert result.status == (200 if replayed else 201)
        assert result.job is not None and result.job.job_spec is not None
        assert result.job.job_spec["name"] == name
        assert result.job.state in (JobState.QUEUED, JobState.ACTIVE, JobState.COMPLETED)
    assert not invalid.ok and invalid.job is None and invalid.status == 422
    assert isinstance(invalid.error, InvalidRequest)
    assert invalid.error.invalid_params[0]["name"] == "[1].resources.node_count"
    alone = invalid.refusal()
    assert isinstance(alone, InvalidRequest)
    assert alone.invalid_params[0]["name"] == "resources.node_count"
    assert first.refusal() is None
    assert "index 1" in str(invalid.error)
    assert first.job is not None and last.job is not None
    return [first.job.id, last.job.id]


def test_launch_jobs_answers_one_typed_result_per_spec_and_a_retry_replays(
    server: Server,
) -> None:
    key = str(uuid.uuid4())
    with GatewayClient(server.url, server.token) as gateway:
        made = check(
            gateway.launch_jobs("local", specs("sync"), key, project="proj1"),
            "sync",
            replayed=False,
        )
        again = check(
            gateway.launch_jobs("local", specs("sync"), key, project="proj1"), "sync", replayed=True
        )
        assert again == made
        # Polled: what is tested here is the bulk launch, not the event stream.
        done = gateway.wait("local", made[1], timeout=60, use_events=False)
        assert done.state == JobState.COMPLETED and gateway.output("local", made[1]) == "three\n"
        # Without a key of the caller's, the SDK sends a fresh one: a new call, new jobs.
        other = gateway.launch_jobs("local", specs("fresh"), project="proj1")
        assert {r.job.id for r in other if r.job}.isdisjoint(made)


def test_the_async_client_launches_in_bulk_too(server: Server) -> None:
    async def launch() -> list[str]:
        async with AsyncGatewayClient(server.url, server.token) as gateway:
            results = await gateway.launch_jobs("local", specs("async"), project="proj1")
            return check(results, "async", replayed=False)

    assert len(set(asyncio.run(launch()))) == 2


def test_a_refused_spec_keeps_its_status_class() -> None:
    """A limit's refusal at an index is `TooManyRequests`, with the problem's members."""
    result = LaunchResult.from_json(
        {
            "index": 4,
            "status": 429,
            "problem": {
                "type": "about:blank",
                "status": 429,
                "title": "Too Many Requests",
                "detail": "alice has 3 unfinished jobs on local (active_jobs_per_user: 3)",
                "instance": "http://gateway.test/api/v2/compute/jobs/local",
                "index": 4,
                "limit": "active_jobs_per_user",
            },
        }
    )
    assert isinstance(result.error, TooManyRequests) and not result.ok and not result.replayed
    assert result.error.status == 429 and "active_jobs_per_user: 3" in result.error.detail
