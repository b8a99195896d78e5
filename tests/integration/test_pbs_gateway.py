"""A real `iri-gateway serve` on the real OpenPBS (scripts/pbs), over HTTP.

- Jobs go in through launchJob on both PBS resources (`pbs`, local as root; `pbs-ssh`, as
  alice through the SSH login node), the server's own poller tracks them, and their output
  comes back through the filesystem API (`tail`) and the job's output.
- bob, whom `pbs-ssh` maps to the same login account as alice, can neither see nor cancel
  alice's job through the gateway.
- kill -9 of a `serve` with submissions in flight on `pbs`: after the restart every launched
  job exists exactly once in PBS (counted by the gateway's tag) and once in the store.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from iri_gateway.client import GatewayClient
from iri_gateway.client.errors import GatewayClientError
from tests.integration.gateway_process import API, Gateway, serve
from tests.integration.test_pbs_engine import holding_profile, jobs_tagged
from tests.support.serve import issue_token

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def gateway(pbs_profile: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A real `serve` on the PBS profile (alice's token, project proj1)."""
    folder = tmp_path_factory.mktemp("pbs-gateway")
    with serve(pbs_profile, folder / "data") as served:
        yield served


@pytest.fixture(scope="module")
def alice(gateway: Gateway) -> Iterator[GatewayClient]:
    with GatewayClient(gateway.url, gateway.token) as client:
        yield client


def test_jobs_and_their_output_through_the_api_on_both_resources(alice: GatewayClient) -> None:
    """launchJob on both resources; the server's poller sees them end; stdout comes back
    through the filesystem API's tail (the job's own output file) and getJob's output, and
    a failing job's stderr and exit code too."""
    program = 'echo "out of $(id -un)"; echo "err of $(id -un)" >&2'
    jobs = {
        (resource, code): alice.submit(
            resource,
            {
                "executable": "/bin/sh",
                "arguments": ["-c", f"{program}; exit {code}"],
                "resources": {"exclusive_node_use": False},
            },
            project="proj1",
        )
        for resource in ("pbs", "pbs-ssh")
        for code in (0, 5)
    }
    account = {"pbs": "root", "pbs-ssh": "alice"}
    for (resource, code), job in jobs.items():
        done = alice.wait(resource, job.id, timeout=120)
        assert done.state == ("completed" if code == 0 else "failed"), done
        assert done.exit_code == code, done
        meta = done.meta_data
        user = account[resource]
        stdout = f"{meta['directory']}/{meta['stdout_path']}"
        stderr = f"{meta['directory']}/{meta['stderr_path']}"
        assert alice.tail(resource, stdout, lines=5).content == f"out of {user}\n", meta
        assert alice.tail(resource, stderr, lines=5).content == f"err of {user}\n", meta
        assert alice.output(resource, job.id) == f"out of {user}\n"


def test_bob_cannot_see_or_cancel_alices_job(
    gateway: Gateway, alice: GatewayClient, tmp_path: Path
) -> None:
    """`pbs-ssh` maps alice and bob to the same login account, so PBS itself would let either
    delete the other's job: the gateway must keep them apart by its own records."""
    data = Path(gateway.log).parent
    bob_token = issue_token(data, "bob", "proj1")
    job = alice.submit(
        "pbs-ssh",
        {
            "executable": "/bin/sleep",
            "arguments": ["300"],
            "resources": {"exclusive_node_use": False},
        },
        project="proj1",
    )
    with GatewayClient(gateway.url, bob_token) as bob:
        with pytest.raises(GatewayClientError) as hidden:
            bob.status("pbs-ssh", job.id)
        assert hidden.value.status == 404, hidden.value
        assert job.id not in [j.id for j in bob.jobs("pbs-ssh", historical=True)]
        with pytest.raises(GatewayClientError) as refused:
            bob.cancel("pbs-ssh", job.id)
        assert refused.value.status == 404, refused.value
        with pytest.raises(GatewayClientError):
            bob.output("pbs-ssh", job.id)
    native_id = alice.status("pbs-ssh", job.id).meta_data["native_id"]
    assert native_id
    still = alice.status("pbs-ssh", job.id)
    assert still.state in ("queued", "active"), still
    alice.cancel("pbs-ssh", job.id)
    assert alice.wait("pbs-ssh", job.id, timeout=120).state == "canceled"


SLOW_QSUB = """#!/bin/sh
# The real qsub, started {delay} s late: the gateway's submissions are in flight long enough
# for the test to kill the server under them (the qsub outlives it, as a child does).
sleep {delay}
exec {qsub} "$@"
"""


def status_of(http: httpx.Client, gateway: Gateway, job_id: str) -> dict[str, Any]:
    answer = http.get(f"{API}/compute/status/pbs/{job_id}", headers=gateway.headers())
    assert answer.status_code == 200, answer.text
    status: dict[str, Any] = answer.json()["status"]
    return status


def sent(http: httpx.Client, gateway: Gateway, job_ids: list[str]) -> list[dict[str, Any]]:
    """Each job's status once the gateway has it from PBS (no longer `new`)."""
    deadline = time.monotonic() + 60
    while True:
        statuses = [status_of(http, gateway, job_id) for job_id in job_ids]
        if all(s["state"] != "new" for s in statuses):
            return statuses
        assert time.monotonic() < deadline, statuses
        time.sleep(0.3)


def launch_together(
    http: httpx.Client, gateway: Gateway, body: dict[str, Any], count: int
) -> list[httpx.Response]:
    """`count` launchJob requests on `pbs` sent at once, their answers in sending order."""
    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(
            pool.map(
                lambda _: http.post(f"{API}/compute/job/pbs", json=body, headers=gateway.headers()),
                range(count),
            )
        )


def test_kill_9_with_submissions_in_flight_leaves_each_job_once(
    pbs_profile: Path, tmp_path: Path
) -> None:
    """Eight launches are answered `new` while their qsub runs (started late by a wrapper);
    the server is killed with SIGKILL under them. The qsubs it started outlive it and deliver
    their jobs; the restarted server finds each by its tag, or submits it if it never
    arrived: every job is then in PBS exactly once, and once in the store."""
    real_qsub = "/usr/local/bin/qsub"
    assert os.access(real_qsub, os.X_OK), "scripts/pbs links the client commands there"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "qsub").write_text(SLOW_QSUB.format(delay=3, qsub=real_qsub))
    (bin_dir / "qsub").chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "IRI_GATEWAY_RESPONSE_WAIT": "0.3",
    }
    profile = holding_profile(pbs_profile, tmp_path)  # the jobs stay held, off the vnodes
    data = tmp_path / "data"
    body = {"executable": "/bin/true", "resources": {"exclusive_node_use": False}}
    jobs: list[str] = []
    try:
        with serve(profile, data, env=env) as first:
            with httpx.Client(base_url=first.url, timeout=60) as http:
                answers = launch_together(http, first, body, 8)
            assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers]
            jobs = [a.json()["id"] for a in answers]
            assert all(a.json()["status"]["state"] == "new" for a in answers), [
                a.json()["status"] for a in answers
            ]
            os.kill(first.pid, signal.SIGKILL)
        # Counted before the restart: at most once each (the in-flight qsubs may not be done).
        assert all(len(jobs_tagged(f"iri-gateway:{job_id}")) <= 1 for job_id in jobs)
        with (
            serve(profile, data, env=env) as second,
            httpx.Client(base_url=second.url, timeout=60) as http,
        ):
            statuses = sent(http, second, jobs)
            assert {s["state"] for s in statuses} <= {"queued", "held"}, statuses
            time.sleep(4)  # two scheduler cycles and reconciles more: still no second qsub
            for job_id, status in zip(jobs, statuses, strict=True):
                native = status["meta_data"]["native_id"]
                assert jobs_tagged(f"iri-gateway:{job_id}") == [native], (job_id, status)
            listed = http.post(f"{API}/compute/status/pbs", headers=second.headers())
            assert listed.status_code == 200, listed.text
            assert sorted(job["id"] for job in listed.json()) == sorted(jobs)
    finally:
        for job_id in jobs:
            for native_id in jobs_tagged(f"iri-gateway:{job_id}"):
                subprocess.run(["qdel", "-W", "force", native_id], capture_output=True, check=False)
