"""A PBS outage under a running gateway: `/etc/init.d/pbs stop`, then `scripts/pbs start`.

The real OpenPBS (server, scheduler, MOM, datastore) is stopped the way a site stops it while
a real `serve` works on the PBS test profile. As for Slurm (test_scheduler_outage.py): launches
are accepted as `new` with PBS's own words and sent, exactly once each, when PBS is back;
reads keep answering; a cancel is recorded (204) and reaches PBS by itself; a job queued
before the outage is still queued after it (not taken for gone while qstat could not
answer). Jobs wait in the queue `parked` (it takes jobs and starts none), so no test here
depends on how fast PBS's scheduler is.

`pbs_daemons` always starts PBS again, even when a test fails, and waits until every vnode
is usable; these tests stop the one PBS server that every PBS test uses, so nothing else
may run beside them.
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import PbsInfo, start_pbs
from tests.integration.gateway_process import API, Gateway, serve
from tests.integration.test_pbs_engine import jobs_tagged

pytestmark = pytest.mark.integration

PBS_WORDS = "Connection refused"
"""What every OpenPBS command prints first when the server is down (then qsub says `cannot
connect to server pbshost`, qdel `Couldn't connect to cluster: pbshost`)."""


class PbsDaemons:
    """Stops PBS as a site does and starts it again with scripts/pbs."""

    def __init__(self, info: PbsInfo) -> None:
        self.info = info

    def up(self) -> bool:
        done = subprocess.run(
            [str(self.info.commands / "qstat"), "-B"],
            capture_output=True,
            timeout=30,
            check=False,
        )
        return done.returncode == 0

    def stop(self) -> None:
        subprocess.run(
            ["/etc/init.d/pbs", "stop"],
            capture_output=True,
            timeout=120,
            check=True,
            stdin=subprocess.DEVNULL,
        )
        assert not self.up(), "PBS still answers after /etc/init.d/pbs stop"

    def start(self) -> None:
        if not self.up():
            start_pbs()


@pytest.fixture
def pbs_daemons(pbs: PbsInfo) -> Iterator[PbsDaemons]:
    daemons = PbsDaemons(pbs)
    daemons.start()
    try:
        yield daemons
    finally:
        daemons.start()


@pytest.fixture
def gateway(pbs_profile: Path, tmp_path: Path) -> Iterator[Gateway]:
    """A real `serve` on the PBS profile; submissions are retried at most 2 s apart, and
    every unsettled job is polled every second (so the outage is seen by several cycles)."""
    env = {
        "IRI_GATEWAY_RESPONSE_WAIT": "8",
        "IRI_GATEWAY_SUBMIT_RETRY_LONGEST": "2",
        "IRI_GATEWAY_POLL_SLOW": "1",
    }
    with serve(pbs_profile, tmp_path / "data", env=env) as served:
        yield served


@pytest.fixture
def name() -> str:
    """A job name unique to the test (its jobs wait in `parked`; `launched` deletes them)."""
    return f"outage-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def launched() -> Iterator[list[str]]:
    """The gateway ids of the test's jobs; their PBS jobs are deleted afterwards."""
    ids: list[str] = []
    yield ids
    for job_id in ids:
        for native_id in jobs_tagged(f"iri-gateway:{job_id}"):
            subprocess.run(["qdel", native_id], capture_output=True, timeout=30, check=False)


def parked_job(name: str) -> dict[str, object]:
    """A job that stays queued (queue `parked` starts nothing)."""
    return {
        "name": name,
        "executable": "/bin/true",
        "attributes": {"duration": 60, "queue_name": "parked"},
    }


def status_of(http: httpx.Client, gateway: Gateway, job_id: str) -> dict[str, Any]:
    answer = http.get(f"{API}/compute/status/pbs/{job_id}", headers=gateway.headers())
    assert answer.status_code == 200, answer.text
    status: dict[str, Any] = answer.json()["status"]
    return status


def wait_state(
    http: httpx.Client, gateway: Gateway, job_id: str, leaving: set[str], timeout: float = 120
) -> dict[str, Any]:
    """The job's status once its state is no longer one of `leaving`."""
    deadline = time.monotonic() + timeout
    while True:
        status = status_of(http, gateway, job_id)
        if status["state"] not in leaving:
            return status
        assert time.monotonic() < deadline, f"still {status}"
        time.sleep(0.5)


def launch_queued(http: httpx.Client, gateway: Gateway, name: str, launched: list[str]) -> str:
    """A parked job launched while PBS is up: answered queued; its gateway id."""
    answer = http.post(f"{API}/compute/job/pbs", json=parked_job(name), headers=gateway.headers())
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"]["state"] == "queued"
    job_id: str = answer.json()["id"]
    launched.append(job_id)
    return job_id


def test_launches_during_a_pbs_outage_are_accepted_and_submitted_once_when_back(
    gateway: Gateway, pbs_daemons: PbsDaemons, name: str, launched: list[str]
) -> None:
    with httpx.Client(base_url=gateway.url, timeout=120) as http:
        before = launch_queued(http, gateway, name, launched)
        pbs_daemons.stop()
        answers: list[httpx.Response] = []

        def launch() -> None:
            answers.append(
                http.post(
                    f"{API}/compute/job/pbs", json=parked_job(name), headers=gateway.headers()
                )
            )

        try:
            launchers = [threading.Thread(target=launch) for _ in range(3)]
            for thread in launchers:
                thread.start()
            for thread in launchers:
                thread.join(120)
            assert [a.status_code for a in answers] == [200] * 3, [a.text for a in answers]
            jobs = [a.json() for a in answers]
            launched.extend(job["id"] for job in jobs)
            for job in jobs:
                assert job["status"]["state"] == "new", job
                assert PBS_WORDS in job["status"]["message"], job
                assert "waiting for the scheduler" in job["status"]["message"], job
            listed = http.post(f"{API}/compute/status/pbs", headers=gateway.headers())
            assert listed.status_code == 200, listed.text
            assert {j["id"] for j in jobs} <= {j["id"] for j in listed.json()}
            # The job queued before the outage: qstat cannot answer, it is not taken for gone.
            time.sleep(3)
            assert status_of(http, gateway, before)["state"] == "queued"
        finally:
            pbs_daemons.start()
        for job in jobs:
            status = wait_state(http, gateway, job["id"], {"new"})
            assert status["state"] == "queued", status
            native_id = http.get(
                f"{API}/compute/status/pbs/{job['id']}", headers=gateway.headers()
            ).json()["status"]["meta_data"]["native_id"]
            assert jobs_tagged(f"iri-gateway:{job['id']}") == [native_id], "submitted once"
        assert status_of(http, gateway, before)["state"] == "queued"


def test_cancel_during_a_pbs_outage_is_accepted_and_reaches_pbs_when_it_is_back(
    gateway: Gateway, pbs_daemons: PbsDaemons, name: str, launched: list[str]
) -> None:
    with httpx.Client(base_url=gateway.url, timeout=120) as http:
        job_id = launch_queued(http, gateway, name, launched)
        pbs_daemons.stop()
        try:
            accepted = http.delete(f"{API}/compute/cancel/pbs/{job_id}", headers=gateway.headers())
            assert accepted.status_code == 204, accepted.text
            status = status_of(http, gateway, job_id)
            assert "cancel requested, not delivered yet" in status["message"], status
            assert PBS_WORDS in status["message"], status
        finally:
            pbs_daemons.start()
        status = wait_state(http, gateway, job_id, {"queued", "held"})
        assert status["state"] == "canceled", status
