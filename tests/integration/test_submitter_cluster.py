"""Submission off the request path on the real test cluster (issue 13, items 1 and 2).

- An image staging step slower than the response wait: launchJob answers within the wait
  with the job `new` ("staging the image ..."), the job becomes `queued` later, a retry with
  the same Idempotency-Key is the same job, and the SDK's `submit` returns it without a
  conflict.
- `kill -9` of a `serve` holding accepted jobs not yet submitted (slurmctld stopped, so they
  wait): the next `serve` on the same data submits each of them exactly once (counted by the
  gateway's tag in Slurm's comment field).

The staging command is a shell script written by the test (a stand-in for `podman-hpc pull`,
which cannot be installed here): it records its call and sleeps. Everything else is real:
`serve`, SQLite, Slurm, the reconcile at start.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from iri_gateway.client import GatewayClient
from tests.integration.conftest import ClusterInfo
from tests.integration.gateway_process import (
    API,
    Gateway,
    profile_allowing,
    sent_status,
    serve,
)
from tests.integration.test_scheduler_outage import (
    Slurmctld,
    held_job,
    slurm_job_ids,
    slurmctld,
    tagged,
)

pytestmark = pytest.mark.integration
__all__ = ["slurmctld"]  # the fixture, shared with the outage tests

STAGING_SECONDS = 6
WAIT = 1.0


@pytest.fixture
def name() -> Iterator[str]:
    unique = f"iri-submitter-{uuid.uuid4().hex[:10]}"
    yield unique
    subprocess.run(["scancel", "-n", unique], capture_output=True, timeout=60, check=False)


def slow_staging_profile(profile: Path, folder: Path) -> tuple[Path, Path]:
    """The cluster profile, `begin` allowed, with Podman images staged at submission by a
    script that sleeps STAGING_SECONDS; returns the profile and the script's call log."""
    calls = folder / "staging-calls.log"
    script = folder / "slow-pull"
    script.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nsleep {STAGING_SECONDS}\n')
    script.chmod(0o755)
    allowing = profile_allowing(profile, ["begin"], folder)
    document: dict[str, Any] = yaml.safe_load(allowing.read_text())
    for resource in document["resources"]:
        if "podman" in resource["runtimes"]:  # not the slurm-oci resources
            resource["runtimes"]["podman"]["staging"] = {"when": "submit", "command": [str(script)]}
    path = folder / "cluster-slow-staging.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path, calls


def container_job(name: str, image: str) -> dict[str, Any]:
    return {**held_job(name), "container": {"image": image, "network": "none"}}


@pytest.fixture
def staging_gateway(cluster_profile: Path, tmp_path: Path) -> Iterator[tuple[Gateway, Path]]:
    profile, calls = slow_staging_profile(cluster_profile, tmp_path)
    with serve(profile, tmp_path / "data", env={"IRI_GATEWAY_RESPONSE_WAIT": str(WAIT)}) as served:
        yield served, calls


def queued(http: httpx.Client, gateway: Gateway, job_id: str) -> dict[str, Any]:
    return sent_status(gateway.url, job_id, gateway.headers())


def test_staging_longer_than_the_wait_answers_new_then_queues(
    staging_gateway: tuple[Gateway, Path], cluster: ClusterInfo, name: str
) -> None:
    gateway, calls = staging_gateway
    key = {"Idempotency-Key": str(uuid.uuid4())}
    body = container_job(name, cluster.test_image)
    with httpx.Client(base_url=gateway.url, timeout=60) as http:
        started = time.monotonic()
        first = http.post(f"{API}/compute/job/cluster", json=body, headers=gateway.headers(**key))
        took = time.monotonic() - started
        assert first.status_code == 200, first.text
        assert took < WAIT + 1.5, f"answered after {took:.1f} s, not within the wait"
        job = first.json()
        assert job["status"]["state"] == "new", job
        assert "staging the image" in job["status"]["message"], job
        # A retry with the key while the staging goes on: the same job, no conflict.
        again = http.post(f"{API}/compute/job/cluster", json=body, headers=gateway.headers(**key))
        assert again.status_code == 200, again.text
        assert again.json()["id"] == job["id"]
        assert again.headers["Idempotency-Key-Reply"] == "hit"
        status = queued(http, gateway, job["id"])
    assert status["state"] == "queued", status
    assert tagged(f"iri-gateway:{job['id']}") == [status["meta_data"]["native_id"]]
    assert calls.read_text().split() == [cluster.test_image], "staged once"


def test_sdk_submit_with_staging_longer_than_its_timeout_gets_the_job(
    staging_gateway: tuple[Gateway, Path], cluster: ClusterInfo, name: str
) -> None:
    """The SDK's HTTP timeout (here 3 s) is shorter than the staging (6 s): the gateway answers
    within its wait, so the SDK gets the job, no time-out, no retry, no 409."""
    gateway, _ = staging_gateway
    with GatewayClient(gateway.url, gateway.token, timeout=3.0) as client:
        job = client.submit("cluster", container_job(name, cluster.test_image), project="proj1")
        assert job.state == "new" and "staging the image" in (job.message or ""), job
        deadline = time.monotonic() + 120
        while job.state == "new":
            assert time.monotonic() < deadline, job
            time.sleep(0.3)
            job = client.status("cluster", job.id)
    assert job.state == "queued", job
    assert slurm_job_ids(name) == [job.meta_data["native_id"]]


def test_kill_9_with_jobs_waiting_to_be_submitted_submits_each_once_after_restart(
    cluster: ClusterInfo,
    cluster_profile: Path,
    slurmctld: Slurmctld,
    tmp_path: Path,
    name: str,
) -> None:
    quick = tmp_path / "slurm-quick.conf"
    conf = re.sub(r"(?m)^MessageTimeout=\d+$", "MessageTimeout=3", cluster.slurm_conf.read_text())
    assert "MessageTimeout=3" in conf
    quick.write_text(conf)
    env = {"SLURM_CONF": str(quick), "IRI_GATEWAY_RESPONSE_WAIT": "0.5"}
    profile = profile_allowing(cluster_profile, ["begin"], tmp_path)
    data = tmp_path / "data"
    with serve(profile, data, env=env) as first:
        slurmctld.stop()
        try:
            with httpx.Client(base_url=first.url, timeout=60) as http:
                answers = [
                    http.post(
                        f"{API}/compute/job/cluster", json=held_job(name), headers=first.headers()
                    )
                    for _ in range(3)
                ]
            assert [a.status_code for a in answers] == [200] * 3, [a.text for a in answers]
            jobs = [a.json()["id"] for a in answers]
            assert all(a.json()["status"]["state"] == "new" for a in answers)
            os.kill(first.pid, signal.SIGKILL)
        finally:
            slurmctld.start()
    # An sbatch started before the kill outlives the killed server (a child is not killed with
    # its parent) and may still deliver its job once slurmctld is back: the restarted server
    # must adopt such a job by its tag, and submit the others, each exactly once (below).
    assert len(slurm_job_ids(name)) <= 3
    with (
        serve(profile, data, env=env) as second,
        httpx.Client(base_url=second.url, timeout=60) as http,
    ):
        statuses = [queued(http, second, job_id) for job_id in jobs]
        assert [s["state"] for s in statuses] == ["queued"] * 3, statuses
        time.sleep(2)  # a reconcile cycle or two more: still no second submission
        for job_id, status in zip(jobs, statuses, strict=True):
            assert tagged(f"iri-gateway:{job_id}") == [status["meta_data"]["native_id"]]
    assert len(slurm_job_ids(name)) == 3


def test_reads_answer_while_every_submission_slot_is_busy(
    staging_gateway: tuple[Gateway, Path], cluster: ClusterInfo, name: str
) -> None:
    """Sixteen launches staging at once hold the sixteen submission slots of the resource;
    getJob and getJobs answer at once all the same (nothing waits on the submitter)."""
    gateway, calls = staging_gateway
    body = container_job(name, cluster.test_image)
    answers: list[httpx.Response] = []
    with httpx.Client(base_url=gateway.url, timeout=60) as http:

        def launch() -> None:
            answers.append(
                http.post(f"{API}/compute/job/cluster", json=body, headers=gateway.headers())
            )

        threads = [threading.Thread(target=launch) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert [a.status_code for a in answers] == [200] * 16
        started = time.monotonic()
        listed = http.post(f"{API}/compute/status/cluster", headers=gateway.headers())
        assert listed.status_code == 200 and time.monotonic() - started < 1.0
        # All 16 staged in parallel: every call was made before the first could finish.
        assert len(calls.read_text().split()) == 16
        for answer in answers:
            assert queued(http, gateway, answer.json()["id"])["state"] == "queued"
    assert len(slurm_job_ids(name)) == 16
