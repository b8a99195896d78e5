"""Concurrent submissions through the real SSH login node (issue 11, item 1).

The test cluster's sshd allows 10 sessions per connection (OpenSSH's default MaxSessions).
32 clients sending 64 launches at once to a real `serve` whose resource is reached through
that sshd once made 14 jobs the gateway called failed (`sbatch … exited -1`) although Slurm
had them, untracked. Now every launch is accepted or cleanly refused (503 with Retry-After),
and every job is accounted for: Slurm has, by the gateway's tag, exactly the accepted jobs,
each once, each with the native id the gateway reports — reached without a restart (through
the continuous reconcile when an answer was lost).

The jobs are held (`--begin` an hour ahead) so they never use the nodes, and cancelled after.
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from iri_gateway.transport.ssh import SshTransport
from tests.integration.conftest import ClusterInfo
from tests.integration.gateway_process import API, Gateway, profile_allowing, serve

pytestmark = pytest.mark.integration

CLIENTS = 32
LAUNCHES_PER_CLIENT = 2


def slurm_jobs_named(name: str) -> list[tuple[str, str]]:
    """(job id, comment) of every job of that name in Slurm, whoever owns it."""
    out = subprocess.run(
        ["squeue", "-h", "-a", "-t", "all", "-n", name, "-o", "%i|%k"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [(line.split("|", 1)[0], line.split("|", 1)[1]) for line in out.splitlines()]


def launch_all(gateway: Gateway, resource: str, document: dict[str, Any]) -> list[httpx.Response]:
    """CLIENTS clients, each with its own connection, send LAUNCHES_PER_CLIENT launches at
    once (a barrier starts them together); every response, in no particular order."""
    responses: list[httpx.Response] = []
    failures: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(CLIENTS)

    def client() -> None:
        try:
            with httpx.Client(base_url=gateway.url, timeout=300) as http:
                start.wait()
                for _ in range(LAUNCHES_PER_CLIENT):
                    answer = http.post(
                        f"{API}/compute/job/{resource}",
                        json=document,
                        headers=gateway.headers(**{"Idempotency-Key": str(uuid.uuid4())}),
                    )
                    with lock:
                        responses.append(answer)
        except BaseException as error:  # reported below, with the others
            with lock:
                failures.append(error)

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not failures, failures
    return responses


def native_ids(
    gateway: Gateway, resource: str, job_ids: list[str], timeout: float = 180
) -> dict[str, str]:
    """Each job's native id, waiting (without any other request) until all have one."""
    found: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=gateway.url, timeout=60) as http:
        while True:
            for job_id in job_ids:
                if job_id in found:
                    continue
                answer = http.get(
                    f"{API}/compute/status/{resource}/{job_id}", headers=gateway.headers()
                )
                assert answer.status_code == 200, answer.text
                status = answer.json()["status"]
                assert status["state"] in ("new", "queued", "held"), status
                native = status.get("meta_data", {}).get("native_id")
                if native:
                    found[job_id] = native
            if len(found) == len(job_ids):
                return found
            assert time.monotonic() < deadline, (
                f"{len(job_ids) - len(found)} accepted jobs still have no native id"
            )
            time.sleep(1)


def test_64_concurrent_launches_over_ssh_are_all_accounted_for(
    cluster_profile: Path, tmp_path: Path
) -> None:
    profile = profile_allowing(cluster_profile, ["begin"], tmp_path)
    name = f"iri-conc-{uuid.uuid4().hex[:10]}"
    document = {
        "name": name,
        "executable": "/bin/true",
        "attributes": {"duration": 60, "custom_attributes": {"begin": "now+1hour"}},
    }
    try:
        with serve(profile, tmp_path / "data") as gateway:
            responses = launch_all(gateway, "cluster-ssh", document)
            assert len(responses) == CLIENTS * LAUNCHES_PER_CLIENT
            unclean = [
                (r.status_code, r.text[:300])
                for r in responses
                if not (r.is_success or r.status_code == 503)
            ]
            assert unclean == [], (
                f"every launch is accepted or cleanly refused; {gateway.tracebacks()}"
            )
            accepted: list[str] = []
            for answer in responses:
                if answer.is_success:
                    accepted.append(answer.json()["id"])
                    continue
                # A clean refusal: the login node was too busy; nothing was accepted.
                assert answer.headers["content-type"].startswith("application/problem+json")
                assert int(answer.headers["Retry-After"]) > 0
            assert accepted, "no launch was accepted"
            reported = native_ids(gateway, "cluster-ssh", accepted)
        in_slurm = slurm_jobs_named(name)
        tags = Counter(comment for _, comment in in_slurm)
        assert [tag for tag, count in tags.items() if count > 1] == [], "no job twice"
        assert set(tags) == {f"iri-gateway:{job_id}" for job_id in accepted}, (
            "Slurm has exactly the accepted jobs: none the gateway does not track"
        )
        by_tag = {comment: native for native, comment in in_slurm}
        assert {job_id: by_tag[f"iri-gateway:{job_id}"] for job_id in accepted} == reported
    finally:
        subprocess.run(["scancel", "-n", name], capture_output=True, timeout=60)


def test_many_concurrent_commands_share_a_bounded_pool(cluster: ClusterInfo) -> None:
    """The transport alone, against the real sshd: 40 commands at once (more than the
    10 sessions sshd allows per connection) all return their own output, over a few
    connections that each carry at most `max_sessions` of them."""
    transport = SshTransport(
        host=cluster.ssh_host,
        port=cluster.ssh_port,
        username=cluster.ssh_user,
        known_hosts=str(cluster.ssh_known_hosts),
        key_file=str(cluster.ssh_key),
        max_sessions=8,
        max_connections=4,
    )
    results: dict[int, Any] = {}
    start = threading.Barrier(40)

    def one(index: int) -> None:
        start.wait()
        try:
            results[index] = transport.run(["sh", "-c", f"sleep 1; echo {index}"])
        except Exception as error:  # looked at below
            results[index] = error

    threads = [threading.Thread(target=one, args=(i,)) for i in range(40)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert {i: getattr(r, "stdout", r) for i, r in results.items()} == {
            i: f"{i}\n" for i in range(40)
        }
        assert all(r.exit_code == 0 for r in results.values())
        assert 1 <= len(transport.connections()) <= 4
    finally:
        transport.close()
