"""A Slurm outage is not the client's fault (issue 11, item 5).

slurmctld of the real test cluster is stopped for a few seconds while a real `serve` works:
launchJob answers 503 with Retry-After and Slurm's own words (not 422), and its retry with the
same Idempotency-Key submits afresh once slurmctld is back; cancelJob answers 503 and the
cancel, recorded, reaches Slurm by itself when slurmctld is back; the SDK's `submit` waits
out a short outage and returns the job.

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
from tests.integration.gateway_process import API, Gateway, profile_allowing, serve

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
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True,
                              timeout=30, check=False)
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
            subprocess.run(["slurmctld", "-f", str(self.conf), "-i"], check=True, timeout=60,
                           capture_output=True)
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
    conf = re.sub(r"(?m)^MessageTimeout=\d+$", "MessageTimeout=3",
                  cluster.slurm_conf.read_text())
    assert "MessageTimeout=3" in conf
    quick = tmp_path / "slurm-quick.conf"
    quick.write_text(conf)
    profile = profile_allowing(cluster_profile, ["begin"], tmp_path)
    with serve(profile, tmp_path / "data", env={"SLURM_CONF": str(quick)}) as served:
        yield served


@pytest.fixture
def name() -> Iterator[str]:
    """A job name unique to the test; its jobs are cancelled afterwards."""
    unique = f"iri-outage-{uuid.uuid4().hex[:10]}"
    yield unique
    subprocess.run(["scancel", "-n", unique], capture_output=True, timeout=60, check=False)


def held_job(name: str) -> dict[str, object]:
    """A job that stays pending an hour (never uses the nodes)."""
    return {"name": name, "executable": "/bin/true",
            "attributes": {"duration": 60, "custom_attributes": {"begin": "now+1hour"}}}


def assert_retry_later(answer: httpx.Response) -> None:
    """503 problem+json with Retry-After and Slurm's own words."""
    assert answer.status_code == 503, (answer.status_code, answer.text)
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert int(answer.headers["Retry-After"]) > 0
    assert SLURM_WORDS in answer.json()["detail"]


def slurm_job_ids(name: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-n", name, "-o", "%i"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return out.split()


def test_launch_during_an_outage_is_503_and_its_retry_submits_afresh(
    gateway: Gateway, slurmctld: Slurmctld, name: str
) -> None:
    key = {"Idempotency-Key": str(uuid.uuid4())}
    with httpx.Client(base_url=gateway.url, timeout=120) as http:
        slurmctld.stop()
        refused = http.post(f"{API}/compute/job/cluster", json=held_job(name),
                            headers=gateway.headers(**key))
        slurmctld.start()
        assert_retry_later(refused)
        again = http.post(f"{API}/compute/job/cluster", json=held_job(name),
                          headers=gateway.headers(**key))
    assert again.status_code == 200, again.text
    assert again.headers["Idempotency-Key-Reply"] == "miss", "submitted afresh, not replayed"
    status = again.json()["status"]
    assert status["state"] == "queued", status
    assert slurm_job_ids(name) == [status["meta_data"]["native_id"]]


def test_cancel_during_an_outage_is_503_and_reaches_slurm_when_it_is_back(
    gateway: Gateway, slurmctld: Slurmctld, name: str
) -> None:
    with httpx.Client(base_url=gateway.url, timeout=120) as http:
        launched = http.post(f"{API}/compute/job/cluster", json=held_job(name),
                             headers=gateway.headers())
        assert launched.status_code == 200, launched.text
        job_id = launched.json()["id"]
        slurmctld.stop()
        refused = http.delete(f"{API}/compute/cancel/cluster/{job_id}",
                              headers=gateway.headers())
        slurmctld.start()
        assert_retry_later(refused)
        deadline = time.monotonic() + 120
        while True:  # no other cancel: the gateway sends the recorded one by itself
            status = http.get(f"{API}/compute/status/cluster/{job_id}",
                              headers=gateway.headers()).json()["status"]
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


def test_sdk_submit_waits_out_a_short_outage(
    gateway: Gateway, slurmctld: Slurmctld, name: str
) -> None:
    recording = Recording()
    slurmctld.stop()
    # Back after a few seconds: after the first attempt has failed (~2 s), before the retry.
    back = threading.Timer(4.0, slurmctld.start)
    back.start()
    try:
        with GatewayClient(gateway.url, gateway.token, transport=recording) as client:
            job = client.submit("cluster", held_job(name), project="proj1")
    finally:
        back.join(timeout=120)
    assert recording.statuses[0] == 503 and recording.statuses[-1] == 200, recording.statuses
    assert job.state == "queued", job
    assert slurm_job_ids(name) == [job.meta_data["native_id"]]
