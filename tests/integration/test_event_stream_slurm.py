"""The job event stream of one real `iri-gateway serve` on the test cluster's Slurm (issue 28,
item 1): what a user watching their jobs sees, against a real scheduler and a real poller.

- Each job's changes arrive `new`, `queued`, `active`, `completed`, once and in order, within
  2 s (p99 over the run's events) of the gateway recording them (the event's `time`).
- A client that drops its stream mid-run and comes back with `Last-Event-ID` gets exactly
  what it missed: what it saw before plus what it got after equals the unbroken stream's.
- Bob's streams, one unfiltered and one filtered on alice's job ids (with a resume from 0),
  carry keep-alives and nothing else: her job ids are neither shown nor refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.gateway_process import API, Gateway, serve
from tests.support.event_stream import Frame, event_stream
from tests.support.serve import issue_token

JOBS = 4
FINAL = {"completed", "failed", "canceled"}


@pytest.fixture
def gateway(cluster_profile: Path, tmp_path: Path) -> Iterator[Gateway]:
    env = {"IRI_GATEWAY_EVENTS_HEARTBEAT": "1", "IRI_GATEWAY_POLL_FAST": "0.5"}
    with serve(cluster_profile, tmp_path / "data", env=env) as gateway:
        yield gateway


def sleeper(name: str) -> dict[str, Any]:
    """A job that runs a few seconds on a shared node: long enough to be seen `active`."""
    return {
        "name": name,
        "executable": "/bin/sleep",
        "arguments": ["4"],
        "resources": {"exclusive_node_use": False, "memory": 100 * 1024 * 1024},
        "attributes": {"duration": 60},
    }


def ours(frames: list[Frame], jobs: list[str]) -> list[Frame]:
    return [f for f in frames if f.data and f.data.get("job_id") in jobs and f.event == "job"]


def all_ended(jobs: list[str]) -> Any:
    def check(got: list[Frame]) -> bool:
        ended = {f.data["job_id"] for f in ours(got, jobs) if f.data and f.data["state"] in FINAL}
        return ended >= set(jobs)

    return check


def test_jobs_on_slurm_stream_every_change_in_time_and_a_resume_misses_nothing(
    gateway: Gateway, tmp_path: Path
) -> None:
    bob = issue_token(tmp_path / "data", "bob", "proj1")
    jobs: list[str] = []
    with (
        event_stream(gateway.url, gateway.token, resource="cluster") as unbroken,
        event_stream(gateway.url, gateway.token) as dropped,
        event_stream(gateway.url, bob) as bobs,
    ):
        for index in range(JOBS):
            answer = httpx.post(
                f"{gateway.url}{API}/compute/job/cluster",
                json=sleeper(f"events-{index}"),
                headers=gateway.headers(),
                timeout=60,
            )
            assert answer.status_code == 200, f"{answer.text}\n{gateway.tracebacks()}"
            jobs.append(answer.json()["id"])
        with event_stream(gateway.url, bob, job_id=jobs, last_event_id=0) as bobs_targeted:
            # The second client drops its stream once a job runs, mid-run.
            before = dropped.events(
                lambda got: any(f.data and f.data["state"] == "active" for f in ours(got, jobs)),
                90,
            )
            dropped.close()
            last = before[-1].id
            assert last is not None
            seen = unbroken.events(all_ended(jobs), 120)
            with event_stream(
                gateway.url, gateway.token, headers={"Last-Event-ID": str(last)}
            ) as resumed:
                after = resumed.events(all_ended(jobs), 60)
            assert bobs.status == bobs_targeted.status == 200
            bob_frames = list(bobs.frames.queue) + list(bobs_targeted.frames.queue)

    got = ours(seen, jobs)
    for job_id in jobs:
        states = [f.data["state"] for f in got if f.data and f.data["job_id"] == job_id]
        assert states == ["new", "queued", "active", "completed"], (job_id, states)
    ids = [f.id for f in got]
    assert ids == sorted(set(ids)), "in log order, each once"

    lags = sorted(f.arrived - f.data["time"] for f in got if f.data)
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
    assert p99 < 2.0, f"p99 {p99:.2f} s from the poller's record to the client: {lags}"

    for frame in got:
        assert frame.data is not None and frame.data["job"]["id"] == frame.data["job_id"]
        assert frame.data["resource_id"] == "cluster"

    pieced = [f.id for f in ours(before, jobs)] + [f.id for f in ours(after, jobs)]
    assert pieced == ids, "before the drop and after the resume: all of it, nothing twice"

    assert bob_frames, "bob's streams carried their keep-alives"
    assert all(f.comment == "keep-alive" for f in bob_frames), [
        (f.event, f.data) for f in bob_frames if f.comment is None
    ]
