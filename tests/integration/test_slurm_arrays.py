"""Arrays on the real test Slurm, through the engine: `#SBATCH --array=...%N` submitted as
one job, tracked with the poller's one squeue per cycle (elements read compactly from it,
exit codes included), chosen elements canceled and then the rest, on this machine and
through the SSH login node."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

from iri_gateway.models.array_elements import ArrayElements
from iri_gateway.models.job import JobState
from iri_gateway.models.job_arrays import ArrayIndices
from iri_gateway.service.jobs.engine import Engine
from tests.integration.conftest import ClusterInfo
from tests.integration.gateway_process import API, sent_status
from tests.integration.test_drain_cluster import launch_in_background, staging_started
from tests.integration.test_slurm_engine import engine, profile, shared_dir, submit, wait_for
from tests.integration.test_submitter_cluster import (
    STAGING_SECONDS,
    container_job,
    name,
    slow_staging_profile,
)
from tests.support.serve import issue_token, running_serve

pytestmark = pytest.mark.integration
__all__ = ["engine", "name", "profile", "shared_dir"]


def elements(engine: Engine, job_id: str) -> dict[int, tuple[JobState, int | None]]:
    record = engine.store.get(job_id)
    assert record is not None
    return {i: (e.state, e.exit_code) for i, e in ArrayElements.load(record.elements)}


def test_a_thousand_elements_with_a_throttle_run_to_completion(
    engine: Engine, shared_dir: Path
) -> None:
    """Every element's exit code and its own output file; never more than the throttle at
    once (each element notes how many others run beside it)."""
    marks = shared_dir / "running"
    marks.mkdir(mode=0o777)
    index = "$IRI_ARRAY_INDEX"
    script = (
        f"touch {marks}/{index}; ls {marks} | wc -l > {shared_dir}/seen-{index}; "
        f"echo element {index}; rm {marks}/{index}; exit $(({index} % 7 == 3))"
    )
    record = submit(
        engine,
        "cluster",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", script],
            "directory": str(shared_dir),
            "stdout_path": "out-%a.txt",
            "array": {"indices": "0-999", "max_concurrent": 6},
        },
    )
    assert record.native_id is not None and record.native_id.isdigit(), record.native_id
    assert "#SBATCH --array=0-999%6" in record.script
    record = wait_for(engine, record.id, lambda r: r.state.final, timeout=600)
    assert record.state == JobState.FAILED, record.message
    found = elements(engine, record.id)
    assert found == {
        i: (JobState.FAILED, 1) if i % 7 == 3 else (JobState.COMPLETED, 0) for i in range(1000)
    }
    assert record.message == "array of 1000: 857 completed, 143 failed"
    for shown in (0, 3, 500, 999):
        assert (shared_dir / f"out-{shown}.txt").read_text() == f"element {shown}\n"
    assert max(int((shared_dir / f"seen-{i}").read_text()) for i in range(1000)) <= 6


@pytest.mark.parametrize("resource", ["cluster", "cluster-ssh"])
def test_chosen_elements_canceled_then_the_rest(engine: Engine, resource: str) -> None:
    record = submit(
        engine,
        resource,
        {
            "executable": "/bin/sh",
            "arguments": ["-c", "sleep 60"],
            "array": {"indices": "0-20:2", "max_concurrent": 2},
        },
        owner="root" if resource == "cluster" else "alice",
    )
    record = wait_for(engine, record.id, lambda r: r.state == JobState.ACTIVE)
    seen = elements(engine, record.id)
    running = [i for i, (state, _) in seen.items() if state == JobState.ACTIVE]
    assert len(running) == 2, elements(engine, record.id)
    chosen = ArrayIndices.parse([running[0], 10, 12, 16])
    engine.cancel_elements(owner=record.owner, job_id=record.id, indices=chosen)
    wait_for(
        engine,
        record.id,
        lambda r: all(elements(engine, r.id)[i][0] == JobState.CANCELED for i in chosen),
    )
    others = elements(engine, record.id)
    assert others[running[1]][0] == JobState.ACTIVE, others
    assert {others[i][0] for i in (14, 18, 20)} <= {JobState.QUEUED, JobState.ACTIVE}
    engine.cancel(owner=record.owner, job_id=record.id)
    record = wait_for(engine, record.id, lambda r: r.state.final)
    assert record.state == JobState.CANCELED, record.message
    assert {state for state, _ in elements(engine, record.id).values()} == {JobState.CANCELED}


def test_kill_9_mid_submission_submits_the_array_once(
    cluster_profile: Path, cluster: ClusterInfo, tmp_path: Path, name: str
) -> None:
    """The serve is killed with -9 while the array's submission runs (its image staged at
    submission by a script that sleeps): the job was recorded first, so the next serve on
    the same store submits it, once, and finds it by its tag (the array's comment, on every
    element's line) rather than submitting it again."""
    profile, calls = slow_staging_profile(cluster_profile, tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    token = issue_token(data, "alice", "proj1")
    headers = {
        "Authorization": f"Bearer {token}",
        "X-IRI-Facility-Project": "proj1",
        "Idempotency-Key": str(uuid.uuid4()),
    }
    body = {**container_job(name, cluster.test_image), "array": {"indices": "0-99"}}
    env = {"IRI_GATEWAY_SETTLE_TIME": "2", "IRI_GATEWAY_POLL_FAST": "0.5"}
    with running_serve(data, args=("--profiles", str(profile)), extra_env=env) as served:
        launch_in_background(served.url, body, headers)  # its answer never comes: killed
        staging_started(calls)
        os.kill(served.process.pid, signal.SIGKILL)
        served.process.wait(timeout=30)
    assert tagged_arrays(name) == set(), "killed before sbatch: nothing in Slurm yet"
    with running_serve(data, args=("--profiles", str(profile)), extra_env=env) as again:
        retry = httpx.post(
            f"{again.url}{API}/compute/job/cluster", json=body, headers=headers, timeout=120
        )
        assert retry.status_code == 200, retry.text
        job_id = retry.json()["id"]
        status = sent_status(again.url, job_id, headers)
        assert status["state"] == "queued", status
        assert status["meta_data"]["array"]["counts"] == {"queued": 100}, status
        time.sleep(STAGING_SECONDS)  # a second submission would have had the time to show
        assert tagged_arrays(name) == {status["meta_data"]["native_id"]}


def tagged_arrays(name: str) -> set[str]:
    """The arrays in Slurm named `name` (each element's and bracket's line, by array id)."""
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-n", name, "-o", "%F"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return set(out.split())


@pytest.mark.parametrize("runtime", ["podman", "charliecloud"])
def test_each_element_reads_its_index_inside_its_container(
    engine: Engine, cluster: ClusterInfo, shared_dir: Path, runtime: str
) -> None:
    image = cluster.test_image if runtime == "podman" else f"{cluster.ch_image_cpu}/"
    record = submit(
        engine,
        "cluster",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", 'echo "index $IRI_ARRAY_INDEX"'],
            "directory": str(shared_dir),
            "stdout_path": f"{runtime}-%a.txt",
            "container": {"image": image, "runtime": runtime},
            "array": {"indices": [2, 5, 7]},
        },
    )
    record = wait_for(engine, record.id, lambda r: r.state.final, timeout=180)
    assert record.state == JobState.COMPLETED, record.message
    for index in (2, 5, 7):
        assert (shared_dir / f"{runtime}-{index}.txt").read_text() == f"index {index}\n"
