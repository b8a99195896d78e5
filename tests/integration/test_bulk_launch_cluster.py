"""Bulk launch on the real test cluster (issue 30, part 3): `launchJobs` into Slurm.

- 200 specs in one call, one in five invalid (four ways: a field the schema refuses, an
  unknown field, more nodes than the resource has, a queue it does not have): each valid one
  is in Slurm exactly once (counted by the gateway's tag in the job's comment), the invalid
  ones refused at their index naming the field; the same call again makes nothing new.
- `kill -9` of the serve while the bulk is being sent (each `sbatch` started a second late by
  a wrapper, so the call's jobs are in flight or waiting their turn): after a restart on the
  same data every accepted job is in Slurm exactly once (the `sbatch` children that outlived
  the server delivered theirs, the reconcile adopts those by tag and sends the others).

Jobs stay pending (`begin: now+1hour`): they never use the nodes. Everything is real:
`serve`, SQLite, Slurm, the reconcile at start; the wrapper is a shell script in PATH.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import ClusterInfo
from tests.integration.gateway_process import API, Gateway, profile_allowing, serve
from tests.integration.test_scheduler_outage import held_job, name, slurm_job_ids, tagged

pytestmark = pytest.mark.integration
__all__ = ["name"]  # the fixture: a job name of the test's, its jobs cancelled after

SLOW_SBATCH = """#!/bin/sh
# The real sbatch, started {delay} s late: a bulk's submissions are in flight long enough for
# the test to kill the server under them (the sbatch outlives it, as a child does).
sleep {delay}
exec {sbatch} "$@"
"""


def slow_sbatch(folder: Path) -> dict[str, str]:
    """The serve's environment: an `sbatch` first in PATH that starts the real one a second
    late, a short response wait, and a settle time of 5 s (the test's restart)."""
    wrapper = folder / "bin" / "sbatch"
    wrapper.parent.mkdir()
    wrapper.write_text(SLOW_SBATCH.format(delay=1, sbatch=shutil.which("sbatch")))
    wrapper.chmod(0o755)
    return {
        "PATH": f"{wrapper.parent}:{os.environ['PATH']}",
        "IRI_GATEWAY_RESPONSE_WAIT": "0.3",
        "IRI_GATEWAY_SETTLE_TIME": "5",
    }


def once_each(natives: dict[str, str]) -> None:
    """Each job is in Slurm exactly once: its native id alone carries its tag."""
    for job_id, native_id in natives.items():
        assert tagged(f"iri-gateway:{job_id}") == [native_id], job_id


INVALID: list[tuple[dict[str, Any], str]] = [
    ({"resources": {"node_count": 0}}, "resources.node_count"),
    ({"no_such_field": True}, "no_such_field"),
    ({"resources": {"node_count": 99, "exclusive_node_use": False}}, "resources.node_count"),
    ({"attributes": {"queue_name": "no-such-queue", "duration": 60}}, "attributes.queue_name"),
]


def sweep(name: str, count: int) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """`count` specs, one in five invalid (by index: the field it is refused for)."""
    specs: list[dict[str, Any]] = []
    refused: dict[int, str] = {}
    for index in range(count):
        spec = {**held_job(name), "resources": {"exclusive_node_use": False}}
        if index % 5 == 3:
            change, field = INVALID[(index // 5) % len(INVALID)]
            spec = {**spec, **change}
            refused[index] = f"[{index}].{field}"
        specs.append(spec)
    return specs, refused


def sent(http: httpx.Client, gateway: Gateway, job_ids: list[str]) -> dict[str, str]:
    """Each job's native id, once it has one (read through getJob)."""
    natives: dict[str, str] = {}
    deadline = time.monotonic() + 180
    while len(natives) < len(job_ids):
        for job_id in job_ids:
            if job_id in natives:
                continue
            answer = http.get(f"{API}/compute/status/cluster/{job_id}", headers=gateway.headers())
            assert answer.status_code == 200, answer.text
            status = answer.json()["status"]
            assert status["state"] in ("new", "queued", "held"), status
            if status["meta_data"]["native_id"]:
                natives[job_id] = status["meta_data"]["native_id"]
        assert time.monotonic() < deadline, f"{len(job_ids) - len(natives)} jobs not sent"
        time.sleep(0.5)
    return natives


def test_200_mixed_specs_each_valid_one_in_slurm_once(
    cluster: ClusterInfo, cluster_profile: Path, tmp_path: Path, name: str
) -> None:
    specs, refused = sweep(name, 200)
    key = {"Idempotency-Key": f"sweep-{name}"}
    profile = profile_allowing(cluster_profile, ["begin"], tmp_path)
    with (
        serve(profile, tmp_path / "data") as gateway,
        httpx.Client(base_url=gateway.url, timeout=120) as http,
    ):
        answer = http.post(
            f"{API}/compute/jobs/cluster", json=specs, headers=gateway.headers(**key)
        )
        assert answer.status_code == 200, answer.text[:2000] + gateway.tracebacks()
        results = answer.json()
        assert [r["index"] for r in results] == list(range(200))
        for result in results:
            index = result["index"]
            if index in refused:
                assert result["status"] == 422, result
                names = [p["name"] for p in result["problem"]["invalid_params"]]
                assert refused[index] in names, (index, result["problem"])
            else:
                assert result["status"] == 201, result
        job_ids = [r["job"]["id"] for r in results if r["status"] == 201]
        assert len(job_ids) == 160
        once_each(sent(http, gateway, job_ids))
        assert len(slurm_job_ids(name)) == 160
        # The same call again: the same jobs, nothing new in Slurm.
        again = http.post(f"{API}/compute/jobs/cluster", json=specs, headers=gateway.headers(**key))
        assert again.status_code == 200, again.text[:2000]
        replayed = again.json()
        assert [r["job"]["id"] for r in replayed if r["status"] == 200] == job_ids
        assert {r["index"] for r in replayed if r["status"] == 422} == set(refused)
    assert len(slurm_job_ids(name)) == 160


def test_kill_9_mid_bulk_then_restart_submits_each_accepted_job_once(
    cluster: ClusterInfo, cluster_profile: Path, tmp_path: Path, name: str
) -> None:
    env = slow_sbatch(tmp_path)
    profile = profile_allowing(cluster_profile, ["begin"], tmp_path)
    data = tmp_path / "data"
    specs, refused = sweep(name, 80)
    with serve(profile, data, env=env) as first:
        with httpx.Client(base_url=first.url, timeout=120) as http:
            answer = http.post(f"{API}/compute/jobs/cluster", json=specs, headers=first.headers())
        assert answer.status_code == 200, answer.text[:2000]
        results = answer.json()
        job_ids = [r["job"]["id"] for r in results if r["status"] == 201]
        assert len(job_ids) == 64 and {r["index"] for r in results if r["status"] == 422} == set(
            refused
        )
        assert all(r["job"]["status"]["state"] == "new" for r in results if r["status"] == 201)
        time.sleep(1.0)  # the first sixteen sbatch are under way; the others wait their turn
        os.kill(first.pid, signal.SIGKILL)
    time.sleep(3)  # the sbatch the killed server started deliver their jobs
    before = len(slurm_job_ids(name))
    assert before < len(job_ids), f"all {before} were sent before the kill: not mid-bulk"
    with (
        serve(profile, data, env=env) as second,
        httpx.Client(base_url=second.url, timeout=120) as http,
    ):
        natives = sent(http, second, job_ids)
        time.sleep(6)  # past the settle time and a reconcile or two: still no second sbatch
        once_each(natives)
    assert len(slurm_job_ids(name)) == len(job_ids)
