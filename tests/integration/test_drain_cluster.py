"""SIGTERM drains a `serve` with a slow launch under way, on the real test cluster (issue 27,
item 6).

The launch is slow in its submitter command: the image is staged at submission by a script
that records its call and sleeps (test_submitter_cluster's stand-in for `podman-hpc pull`),
and the launch request waits for it (`response_wait` longer than the staging).

- Within `drain_timeout`: the launch under way is answered (the job `queued`, in Slurm once),
  then `serve` exits 0.
- Past `drain_timeout`: the launch is cut (answered 503 with Retry-After), `serve` still
  exits 0 soon after the timeout, and the job, recorded before the cut, is submitted once by
  the next `serve` on the same store (its start-up reconcile, then the continuous one after
  the settle time); the client's retry with the same Idempotency-Key gets that job.

Both on a fresh PostgreSQL database; the replica that drained says it stopped.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, select

from iri_gateway.service.operations.schema import AuditRow, ReplicaRow
from tests.integration.conftest import ClusterInfo
from tests.integration.gateway_process import API, sent_status
from tests.integration.test_scheduler_outage import tagged
from tests.integration.test_submitter_cluster import (
    STAGING_SECONDS,
    container_job,
    name,
    slow_staging_profile,
)
from tests.support.serve import RunningServe, issue_token, running_serve

pytestmark = pytest.mark.integration
__all__ = ["name"]  # the fixture: a unique job name, its Slurm jobs canceled afterwards


@dataclass(frozen=True)
class Site:
    profile: Path
    calls: Path
    data: Path
    headers: dict[str, str]
    env: dict[str, str]


@pytest.fixture
def site(cluster_profile: Path, tmp_path: Path, postgres_url: str) -> Site:
    profile, calls = slow_staging_profile(cluster_profile, tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    token = issue_token(data, "alice", "proj1")
    headers = {"Authorization": f"Bearer {token}", "X-IRI-Facility-Project": "proj1"}
    env = {
        "IRI_GATEWAY_DATABASE_URL": postgres_url,
        "IRI_GATEWAY_RESPONSE_WAIT": str(STAGING_SECONDS * 4),
        "IRI_GATEWAY_SETTLE_TIME": "2",
        "IRI_GATEWAY_POLL_FAST": "0.5",
    }
    return Site(profile, calls, data, headers, env)


@contextmanager
def serving(site: Site, drain_timeout: float, log: str) -> Iterator[RunningServe]:
    env = {**site.env, "IRI_GATEWAY_DRAIN_TIMEOUT": str(drain_timeout)}
    with running_serve(
        site.data,
        args=("--profiles", str(site.profile)),
        extra_env=env,
        log=site.data.parent / log,
        stop_timeout=60,
    ) as served:
        yield served


def launch_in_background(url: str, body: dict[str, Any], headers: dict[str, str]) -> list[Any]:
    """POST the launch from a thread; the list gets its answer or its connection error."""
    outcome: list[Any] = []

    def send() -> None:
        try:
            outcome.append(
                httpx.post(
                    f"{url}{API}/compute/job/cluster", json=body, headers=headers, timeout=120
                )
            )
        except httpx.TransportError as error:
            outcome.append(error)

    threading.Thread(target=send, daemon=True).start()
    return outcome


def staging_started(calls: Path, count: int = 1) -> None:
    deadline = time.monotonic() + 60
    while not (calls.exists() and len(calls.read_text().split()) >= count):
        assert time.monotonic() < deadline, "the staging command never ran"
        time.sleep(0.1)


def audited(postgres_url: str) -> list[tuple[str, int | None, str | None]]:
    """The audit log's (operation, status, request id) records, oldest first."""
    database = create_engine(postgres_url)
    try:
        with database.connect() as connection:
            rows = connection.execute(
                select(AuditRow.operation, AuditRow.status, AuditRow.request_id).order_by(
                    AuditRow.id
                )
            ).all()
    finally:
        database.dispose()
    return [(operation, status, request) for operation, status, request in rows]


def stopped_replicas(postgres_url: str) -> list[tuple[int, float | None]]:
    database = create_engine(postgres_url)
    try:
        with database.connect() as connection:
            rows = connection.execute(select(ReplicaRow.pid, ReplicaRow.stopped_at)).all()
    finally:
        database.dispose()
    return [(pid, stopped) for pid, stopped in rows]


def test_sigterm_finishes_a_slow_launch_under_way_then_exits_0(
    site: Site, cluster: ClusterInfo, name: str, postgres_url: str
) -> None:
    headers = {**site.headers, "Idempotency-Key": str(uuid.uuid4())}
    with serving(site, drain_timeout=60, log="drained.log") as served:
        outcome = launch_in_background(served.url, container_job(name, cluster.test_image), headers)
        staging_started(site.calls)
        signalled = time.monotonic()
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(timeout=90) == 0, served.output()
        took = time.monotonic() - signalled
    assert outcome and isinstance(outcome[0], httpx.Response), outcome
    answer = outcome[0]
    assert answer.status_code == 200, answer.text
    job = answer.json()
    assert job["status"]["state"] == "queued", job
    assert tagged(f"iri-gateway:{job['id']}") == [job["status"]["meta_data"]["native_id"]]
    assert took < STAGING_SECONDS + 30, took
    assert "draining" in served.output(), served.output()
    assert [stopped is not None for _, stopped in stopped_replicas(postgres_url)] == [True]


def test_the_drain_timeout_cuts_a_slower_launch_and_the_next_serve_submits_it_once(
    site: Site, cluster: ClusterInfo, name: str, postgres_url: str
) -> None:
    body = container_job(name, cluster.test_image)
    headers = {**site.headers, "Idempotency-Key": str(uuid.uuid4())}
    with serving(site, drain_timeout=1, log="cut.log") as served:
        outcome = launch_in_background(served.url, body, headers)
        staging_started(site.calls)
        signalled = time.monotonic()
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(timeout=60) == 0, served.output()
        took = time.monotonic() - signalled
    assert took < STAGING_SECONDS, f"the drain took {took:.1f} s, past its 1 s"
    deadline = time.monotonic() + 30
    while not outcome:
        assert time.monotonic() < deadline, "the cut launch never ended"
        time.sleep(0.1)
    # cut: a 503 problem that says to ask again (uvicorn alone answers a bare 500)
    cut = outcome[0]
    assert isinstance(cut, httpx.Response) and cut.status_code == 503, (outcome, served.output())
    assert cut.headers["Retry-After"] == "1" and cut.headers["X-Request-ID"], cut.headers
    assert "drain_timeout" in cut.json()["detail"] and "ask again" in cut.json()["detail"], cut.text
    assert "scheduler commands cut by the stop" in served.output(), served.output()
    # the job was recorded, so the cut call is in the audit log, with the answer it got
    assert audited(postgres_url) == [("launchJob", 503, cut.headers["X-Request-ID"])]
    assert [stopped is not None for _, stopped in stopped_replicas(postgres_url)] == [True]

    with serving(site, drain_timeout=30, log="next.log") as again:
        retry = httpx.post(
            f"{again.url}{API}/compute/job/cluster", json=body, headers=headers, timeout=120
        )
        assert retry.status_code == 200, retry.text
        job_id = retry.json()["id"]
        status = sent_status(again.url, job_id, headers)
        assert status["state"] == "queued", status
        time.sleep(STAGING_SECONDS)  # a second submission would have had the time to show
        assert tagged(f"iri-gateway:{job_id}") == [status["meta_data"]["native_id"]]
        again.process.send_signal(signal.SIGTERM)
        assert again.process.wait(timeout=60) == 0, again.output()
    # staged by the cut attempt, then once more by the next serve's one submission
    assert len(site.calls.read_text().split()) == 2, site.calls.read_text()
