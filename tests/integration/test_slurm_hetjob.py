"""Heterogeneous jobs on the real test cluster, tracked as one job under the leader's id.

Hand-written 2-component scripts (`#SBATCH hetjob`) go through `SlurmBatch` as the gateway
submits any script (sbatch on stdin, tag as comment), and through the engine as a cluster
job whose script writes its members' files in `.iri-cluster-$SLURM_JOB_ID` by hand.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.models.job import JobState, NativeStatus
from iri_gateway.schedulers.slurm.batch import SlurmBatch
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.transport.local import LocalTransport
from tests.conftest import refresh_until, stored_plan

pytestmark = pytest.mark.integration

HEADER = """#!/bin/bash
#SBATCH -N1 -n1 -o {out}/het-%j.out{first}
#SBATCH hetjob
#SBATCH -N1 -n1
"""


def het_script(out: Path, body: str, first: str = "") -> str:
    return HEADER.format(out=out, first=f"\n#SBATCH {first}" if first else "") + body


class TrackedSlurm(SlurmBatch):
    """SlurmBatch that remembers what it submitted, so the test can clean up."""

    def __init__(self) -> None:
        super().__init__(LocalTransport(), history="jobcomp")
        self.submitted: list[str] = []

    def submit(self, script: str, *, tag: str) -> str:
        native_id = super().submit(script, tag=tag)
        self.submitted.append(native_id)
        return native_id


@pytest.fixture
def batch(cluster: Any) -> Iterator[TrackedSlurm]:
    slurm = TrackedSlurm()
    yield slurm
    if slurm.submitted:
        subprocess.run(["scancel", *slurm.submitted], capture_output=True, timeout=30)


def components(native_id: str) -> list[str]:
    """squeue's own lines for the job's components: `id+offset|STATE`."""
    out = subprocess.run(
        ["squeue", "--me", "-h", "-t", "all", "-o", "%i|%T"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return sorted(line for line in out.splitlines() if line.startswith(f"{native_id}+"))


def poll(
    batch: SlurmBatch, native_id: str, done: Callable[[NativeStatus], bool], timeout: float = 60
) -> tuple[NativeStatus, list[JobState | None]]:
    """The first status that is `done`, and the states seen until then."""
    seen: list[JobState | None] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = batch.statuses([native_id]).get(native_id)
        if status is not None:
            if not seen or seen[-1] != status.state:
                seen.append(status.state)
            if done(status):
                return status, seen
        time.sleep(0.3)
    raise AssertionError(f"{native_id}: states seen {seen}")


def test_a_het_job_is_queued_then_active_then_completed_as_one_job(
    batch: SlurmBatch, tmp_path: Path
) -> None:
    script = het_script(
        tmp_path,
        "srun --het-group=0 sleep 3 & srun --het-group=1 sleep 3 & wait\n",
        first="--begin=now+4",
    )
    native_id = batch.submit(script, tag="iri-gateway:het-test-1")
    assert native_id.isdigit(), "sbatch prints the leader's id"
    queued = batch.statuses([native_id])[native_id]
    assert (queued.native_id, queued.state) == (native_id, JobState.QUEUED)
    assert queued.message.startswith("PENDING"), queued.message
    assert components(native_id) == [f"{native_id}+0|PENDING", f"{native_id}+1|PENDING"]
    assert batch.find("iri-gateway:het-test-1") == native_id
    active, _ = poll(batch, native_id, lambda s: s.state == JobState.ACTIVE)
    assert active.message == "RUNNING"
    assert components(native_id) == [f"{native_id}+0|RUNNING", f"{native_id}+1|RUNNING"]
    done, seen = poll(batch, native_id, lambda s: s.state is not None and s.state.final)
    assert (done.state, done.exit_code, done.message) == (
        JobState.COMPLETED,
        0,
        "COMPLETED, exit code 0",
    )
    assert seen[-2:] == [JobState.ACTIVE, JobState.COMPLETED]


def test_cancelling_the_leader_cancels_every_component(batch: SlurmBatch, tmp_path: Path) -> None:
    script = het_script(
        tmp_path, "srun --het-group=0 sleep 120 & srun --het-group=1 sleep 120 & wait\n"
    )
    native_id = batch.submit(script, tag="iri-gateway:het-test-2")
    poll(batch, native_id, lambda s: s.state == JobState.ACTIVE)
    batch.cancel(native_id)
    done, _ = poll(batch, native_id, lambda s: s.state is not None and s.state.final)
    assert done.state == JobState.CANCELED
    assert components(native_id) == [f"{native_id}+0|CANCELLED", f"{native_id}+1|CANCELLED"]
    batch.cancel(native_id)  # already ended: not an error


def test_a_component_cancelled_alone_makes_the_ended_job_canceled(
    batch: SlurmBatch, tmp_path: Path
) -> None:
    """jobcomp records the leader as COMPLETED; the live queue knows better.

    Component 0 runs until the test has seen the cancelled component beside it (a fixed
    sleep ended first once on a loaded CI machine, and the job with it).
    """
    go = tmp_path / "go"
    script = het_script(
        tmp_path,
        f"srun --het-group=0 sh -c 'until [ -e {go} ]; do sleep 0.2; "
        "done' & srun --het-group=1 sleep 120 & wait\nexit 0\n",
    )
    native_id = batch.submit(script, tag="iri-gateway:het-test-3")
    poll(batch, native_id, lambda s: s.state == JobState.ACTIVE)
    subprocess.run(["scancel", f"{native_id}+1"], check=True, timeout=30)
    try:
        running, _ = poll(batch, native_id, lambda s: "CANCELLED" in s.message)
    finally:
        go.touch()
    assert running.state == JobState.ACTIVE
    assert running.message == (
        f"RUNNING (components {native_id}+0 RUNNING, {native_id}+1 CANCELLED)"
    )
    done, _ = poll(batch, native_id, lambda s: s.state is not None and s.state.final)
    assert done.state == JobState.CANCELED
    assert done.message == (
        f"CANCELLED (components {native_id}+0 COMPLETED, {native_id}+1 CANCELLED)"
    )


# A cluster job's script by hand: members listed (with the nodes Slurm gave each component),
# then each member's exit appended as it ends; worker1 fails.
MEMBERS_BODY = r"""
cd -- {directory} || exit 1
folder=".iri-cluster-$SLURM_JOB_ID"
mkdir -p "$folder"
printf 'master1\tmaster\t1\t%s\t127.0.0.1\n' "$SLURM_JOB_NODELIST_HET_GROUP_0" > "$folder/m"
printf 'worker1\tworker\t1\t%s\t127.0.0.1\n' "$SLURM_JOB_NODELIST_HET_GROUP_1" >> "$folder/m"
mv "$folder/m" "$folder/members"
until [ -e go ]; do sleep 0.2; done
srun --het-group=1 sh -c 'exit 3'; printf 'worker1\t%s\n' "$?" >> "$folder/exits"
srun --het-group=0 true; printf 'master1\t%s\n' "$?" >> "$folder/exits"
exit 3
"""


@pytest.fixture
def engine(cluster_engine: Engine) -> Engine:
    return cluster_engine


def test_the_engine_reads_the_members_of_a_het_cluster_job(engine: Engine, tmp_path: Path) -> None:
    directory = tmp_path / "job"
    directory.mkdir()
    script = het_script(directory, MEMBERS_BODY.format(directory=directory))
    record = engine.store.create(
        owner="root",
        resource_id="cluster",
        spec={},
        effective_spec={"directory": str(directory)},
        plan=stored_plan(cluster_size=2),
        script=script,
    )
    backend = engine.backends.get(engine.registry.get("cluster"), "root")
    native_id = backend.batch.submit(script, tag=record.tag)
    engine.store.set_native_id(record.id, native_id, f"submitted as {native_id}")
    listed = refresh_until(
        engine, "cluster", record.id, lambda r: len(r.members) == 2, timeout=60, pause=0.3
    )
    assert listed.state == JobState.ACTIVE
    nodes = [m["node"] for m in listed.members]
    assert [m["state"] for m in listed.members] == ["active", "active"]
    assert len(set(nodes)) == 2 and all(node in ("n1", "n2", "n3", "n4") for node in nodes)
    (directory / "go").touch()
    done = refresh_until(
        engine, "cluster", record.id, lambda r: r.state.final, timeout=60, pause=0.3
    )
    assert (done.state, done.exit_code) == (JobState.FAILED, 3)
    assert done.message == (
        f"member worker1 (role worker, on {nodes[1]}) exited with 3; FAILED, exit code 3"
    )
    assert [(m["name"], m["state"], m["exit_code"]) for m in done.members] == [
        ("master1", "completed", 0),
        ("worker1", "failed", 3),
    ]
