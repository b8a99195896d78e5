"""A Slurm outage is not the client's fault (issue 11, item 5).

slurmctld of the real test cluster is stopped for a few seconds while a real `serve` works.
Since issue 13 (submission off the request path) an outage refuses nothing: launchJob accepts
the job (`new`, Slurm's own words in its message; issue 11 answered 503 and withdrew the
record) and the submitter sends it, exactly once, when slurmctld is back; getJob and getJobs
keep answering; cancelJob is accepted (204, issue 11: 503) and the recorded cancel reaches
Slurm by itself; the SDK's `submit` gets the job with its first request.

`slurmctld` always starts slurmctld again, even when a test fails, and waits until
`scontrol ping` says UP. The gateway's Slurm commands read a copy of the cluster's slurm.conf
with a shorter MessageTimeout (3 s instead of 10): a command then gives up after about 2 s
instead of 9, which keeps each outage short for everyone else using the cluster. slurmctld
itself runs with the cluster's own configuration.
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

import httpx
import pytest

from iri_gateway.client import GatewayClient
from tests.integration.conftest import ClusterInfo
from tests.integration.gateway_process import (
    API,
    Gateway,
    profile_allowing,
    sent_status,
    serve,
)

pytestmark = pytest.mark.integration

SLURM_WORDS = "Unable to contact slurm controller"


class Slurmctld:
    """Stops and starts the test cluster's slurmctld (as scripts/cluster starts it)."""

    def __init__(self, cluster: ClusterInfo) -> None:
        self.conf = cluster.slurm_conf
        self.pid_file = cluster.dir / "slurm" / "run" / "slurmctld.pid"

    def _pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return None
        return pid if comm == "slurmctld" else None

    def up(self) -> bool:
        ping = subprocess.run(
            ["scontrol", "ping"], capture_output=True, text=True, timeout=30, check=False
        )
        return "is UP" in ping.stdout

    def stop(self) -> None:
        pid = self._pid()
        assert pid is not None, "slurmctld is not running"
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while self._pid() is not None:
            assert time.monotonic() < deadline, "slurmctld did not stop"
            time.sleep(0.1)

    def start(self) -> None:
        """Start it unless it runs; return once `scontrol ping` says UP."""
        if self._pid() is None:
            subprocess.run(
                ["slurmctld", "-f", str(self.conf), "-i"],
                check=True,
                timeout=60,
                capture_output=True,
            )
        deadline = time.monotonic() + 90
        while not self.up():
            assert time.monotonic() < deadline, "slurmctld is not UP again"
            time.sleep(0.3)


@pytest.fixture
def slurmctld(cluster: ClusterInfo) -> Iterator[Slurmctld]:
    """The cluster's slurmctld, running again after the test whatever happened."""
    daemon = Slurmctld(cluster)
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.start()


@pytest.fixture
def gateway(cluster: ClusterInfo, cluster_profile: Path, tmp_path: Path) -> Iterator[Gateway]:
    """A real `serve` on the cluster profile; its Slurm commands give up after ~2 s."""
    conf = re.sub(r"(?m)^MessageTimeout=\d+$", "MessageTimeout=3", cluster.slurm_conf.read_text())
    assert "MessageTimeout=3" in conf
    quick = tmp_path / "slurm-quick.conf"
    quick.write_text(conf)
    profile = profile_allowing(cluster_profile, ["begin"], tmp_path)
    # The answer waits for the first attempt (~2 s with the short MessageTimeout); retries
    # come at most 2 s apart, so the jobs go out soon after slurmctld is back.
    env = {
        "SLURM_CONF": str(quick),
        "IRI_GATEWAY_RESPONSE_WAIT": "8",
        "IRI_GATEWAY_SUBMIT_RETRY_LONGEST": "2",
    }
    with serve(profile, tmp_path / "data", env=env) as served:
        yield served


@pytest.fixture
def name() -> Iterator[str]:
    """A job name unique to the test; its jobs are cancelled afterwards."""
    unique = f"iri-outage-{uuid.uuid4().hex[:10]}"
    yield unique
    subprocess.run(["scancel", "-n", unique], capture_output=True, timeout=60, check=False)


def held_job(name: str) -> dict[str, object]:
    """A job that stays pending an hour (never uses the nodes)."""
    return {
        "name": name,
        "executable": "/bin/true",
        "attributes": {"duration": 60, "custom_attributes": {"begin": "now+1hour"}},
    }


def slurm_job_ids(name: str) -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-n", name, "-o", "%i"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return out.split()


def tagged(tag: str) -> list[str]:
    """Slurm's jobs carrying the gateway's tag (its comment)."""
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-o", "%i|%k"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [line.split("|")[0] for line in out.splitlines() if line.split("|")[1] == tag]


def test_launches_during_an_outage_are_accepted_and_submitted_once_when_back(
    gateway: Gateway, slurmctld: Slurmctld, name: str
) -> None:
    """Issue 13: an accepted launch is not failed by an outage, nor refused (since issue 13;
    issue 11 answered 503 and withdrew the record): it is `new`, with Slurm's words, and is
    submitted, exactly once, when slurmctld is back; reads keep answering meanwhile."""
    with httpx.Client(base_url=gateway.url, timeout=120) as http:
        slurmctld.stop()
        answers: list[httpx.Response] = []

        def launch() -> None:
            answers.append(
                http.post(
                    f"{API}/compute/job/cluster", json=held_job(name), headers=gateway.headers()
                )
            )

        launchers = [threading.Thread(target=launch) for _ in range(4)]
        for thread in launchers:
            thread.start()
        for thread in launchers:
            thread.join(120)
        try:
            assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
            jobs = [a.json() for a in answers]
            for job in jobs:
                assert job["status"]["state"] == "new", job
                assert SLURM_WORDS in job["status"]["message"], job
                assert "waiting for the scheduler" in job["status"]["message"], job
            listed = http.post(f"{API}/compute/status/cluster", headers=gateway.headers())
            assert listed.status_code == 200
            assert {j["id"] for j in jobs} <= {j["id"] for j in listed.json()}
            one = http.get(
                f"{API}/compute/status/cluster/{jobs[0]['id']}", headers=gateway.headers()
            )
            assert one.status_code == 200 and one.json()["status"]["state"] == "new"
        finally:
            slurmctld.start()
        for job in jobs:
            status = sent_status(gateway.url, job["id"], gateway.headers())
            assert status["state"] == "queued", status
            history = http.get(
                f"{API}/compute/status/cluster/{job['id']}", headers=gateway.headers()
            ).json()
            assert history["status"]["state"] == "queued"
            assert tagged(f"iri-gateway:{job['id']}") == [status["meta_data"]["native_id"]]
    assert len(slurm_job_ids(name)) == 4, "each submitted exactly once"


def test_cancel_during_an_outage_is_accepted_and_reaches_slurm_when_it_is_back(
    gateway: Gateway, slurmctld: Slurmctld, name: str
) -> None:
    """Since issue 13 the cancel is recorded and accepted (204), not answered 503: the job's
    message says it is not delivered yet, and it reaches Slurm by itself when it is back."""
    with httpx.Client(base_url=gateway.url, timeout=120) as http:
        launched = http.post(
            f"{API}/compute/job/cluster", json=held_job(name), headers=gateway.headers()
        )
        assert launched.status_code == 200, launched.text
        assert launched.json()["status"]["state"] == "queued"
        job_id = launched.json()["id"]
        slurmctld.stop()
        try:
            accepted = http.delete(
                f"{API}/compute/cancel/cluster/{job_id}", headers=gateway.headers()
            )
            assert accepted.status_code == 204, accepted.text
            status = http.get(
                f"{API}/compute/status/cluster/{job_id}", headers=gateway.headers()
            ).json()["status"]
            assert "cancel requested, not delivered yet" in status["message"], status
            assert SLURM_WORDS in status["message"], status
        finally:
            slurmctld.start()
        deadline = time.monotonic() + 120
        while True:  # no other cancel: the gateway sends the recorded one by itself
            status = http.get(
                f"{API}/compute/status/cluster/{job_id}", headers=gateway.headers()
            ).json()["status"]
            if status["state"] == "canceled":
                break
            assert status["state"] in ("queued", "held"), status
            assert time.monotonic() < deadline, f"not canceled: {status}"
            time.sleep(0.5)


class Recording(httpx.HTTPTransport):
    """The real HTTP transport, noting the status of every answer."""

    def __init__(self) -> None:
        super().__init__()
        self.statuses: list[int] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.statuses.append(response.status_code)
        return response


def test_sdk_submit_during_a_short_outage_gets_the_job_at_once(
    gateway: Gateway, slurmctld: Slurmctld, name: str
) -> None:
    """Issue 11 had the SDK wait out 503s; since issue 13 the first answer is already the
    job (`new`, Slurm's words), one request, and the SDK's `wait` sees it queued later."""
    recording = Recording()
    slurmctld.stop()
    try:
        with GatewayClient(gateway.url, gateway.token, transport=recording) as client:
            job = client.submit("cluster", held_job(name), project="proj1")
            assert recording.statuses == [200], recording.statuses
            assert job.state == "new" and SLURM_WORDS in (job.message or ""), job
            slurmctld.start()
            deadline = time.monotonic() + 120
            while job.state == "new":
                assert time.monotonic() < deadline, job
                time.sleep(0.5)
                job = client.status("cluster", job.id)
    finally:
        slurmctld.start()
    assert job.state == "queued", job
    assert slurm_job_ids(name) == [job.meta_data["native_id"]]
