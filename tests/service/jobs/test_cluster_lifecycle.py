"""One life cycle for a cluster job (`cluster_lifecycle`), run for real on the `local` resource.

Every member is a real bash process started by the rendered script; the policies differ in
what ends the cluster: the primary's end (`primary_ends_all`, the default), the first failure
(`first_failure_ends_all`), or nothing but every member's own end (`all_must_end`). Members
that would run for minutes show whether they were stopped: each test finishes in seconds
only when they were, and fails on its timeout when they were not.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.operations.store import JobRecord
from tests.service.jobs.test_engine_local import make_engine, wait_for


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    return make_engine(tmp_path)


def cluster(primary: str, workers: str, policy: str | None = None) -> Any:
    """A primary and two workers, each running its own shell line."""
    document: dict[str, Any] = {
        "executable": "/bin/sh",
        "arguments": ["-c", primary],
        "roles": [
            {"name": "main", "count": 1},
            {"name": "worker", "count": 2, "arguments": ["-c", workers]},
        ],
    }
    if policy is not None:
        document["cluster_lifecycle"] = policy
    return parse_jobspec(document)


def run(engine: Engine, spec: Any, timeout: float = 30) -> tuple[JobRecord, float]:
    started = time.monotonic()
    record = engine.submit(owner="alice", resource_id="local", spec=spec).record
    record = wait_for(
        engine, record.id, lambda r: r.state.final and bool(r.members), timeout=timeout
    )
    return record, time.monotonic() - started


def exits(record: JobRecord) -> list[str]:
    folder = Path(record.effective_spec["directory"]) / f".iri-cluster-{record.native_id}"
    return (folder / "exits").read_text().splitlines()


LONG = 'sleep 300 & echo $! > "sleep-$IRI_CLUSTER_ROLE$IRI_CLUSTER_ROLE_INDEX.pid"; wait'
"""A member that runs for minutes in a grandchild process (`sh` waiting for its `sleep`):
stopping the member's shell alone would leave the sleep running after the job."""


def assert_no_sleep_left(record: JobRecord, names: list[str]) -> None:
    """Every recorded `sleep` of the named members has ended (within a few seconds)."""
    folder = Path(record.effective_spec["directory"])
    pids = [int((folder / f"sleep-{name}.pid").read_text()) for name in names]
    deadline = time.monotonic() + 5
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [
            pid
            for pid in pids
            if Path(f"/proc/{pid}").exists()
            and "sleep" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        ]
        time.sleep(0.1)
    assert not alive, f"processes left behind after the job: {alive}"


def members(record: JobRecord) -> dict[str, tuple[str, bool]]:
    return {m["name"]: (m["state"], bool(m.get("stopped"))) for m in record.members}


def test_by_default_the_primarys_end_stops_the_long_running_workers(engine: Engine) -> None:
    record, took = run(engine, cluster("sleep 1; echo done", LONG))
    assert record.state == JobState.COMPLETED and record.exit_code == 0, record
    assert took < 20, f"the workers ran on: {took:.0f} s"
    assert members(record) == {
        "main1": ("completed", False),
        "worker1": ("completed", True),
        "worker2": ("completed", True),
    }
    lines = exits(record)
    assert lines[0] == "main1\t0"
    assert sorted(line.split("\t")[0] + "\t" + line.split("\t")[2] for line in lines[1:]) == [
        "worker1\tstopped",
        "worker2\tstopped",
    ]
    assert_no_sleep_left(record, ["worker1", "worker2"])


def test_the_primarys_failure_is_the_jobs_under_primary_ends_all(engine: Engine) -> None:
    record, _ = run(engine, cluster("sleep 1; exit 4", LONG, "primary_ends_all"))
    assert record.state == JobState.FAILED and record.exit_code == 4, record
    assert record.message is not None and record.message.startswith("member main1 (role main")
    assert_no_sleep_left(record, ["worker1", "worker2"])


def test_first_failure_ends_all_lets_the_others_outlive_the_primary(engine: Engine) -> None:
    record, took = run(engine, cluster("true", "sleep 3", "first_failure_ends_all"))
    assert record.state == JobState.COMPLETED, record
    assert took >= 3, "the workers ran to their own end"
    assert members(record) == {
        "main1": ("completed", False),
        "worker1": ("completed", False),
        "worker2": ("completed", False),
    }


def test_first_failure_ends_all_stops_everyone_at_a_failure(engine: Engine) -> None:
    workers = 'if [ "$IRI_CLUSTER_ROLE_INDEX" = 2 ]; then sleep 1; exit 3; fi; ' + LONG
    record, took = run(engine, cluster(LONG, workers, "first_failure_ends_all"))
    assert took < 20, f"the cluster ran on after the failure: {took:.0f} s"
    assert record.state == JobState.FAILED and record.exit_code == 3, record
    assert record.message is not None and record.message.startswith("member worker2 ")
    assert members(record)["worker1"] == ("failed", True)
    assert_no_sleep_left(record, ["main1", "worker1"])


def test_all_must_end_stops_nobody(engine: Engine) -> None:
    workers = 'if [ "$IRI_CLUSTER_ROLE_INDEX" = 1 ]; then exit 3; fi; sleep 3'
    record, took = run(engine, cluster("true", workers, "all_must_end"))
    assert took >= 3, "worker2 ran to its own end after worker1 failed"
    assert record.state == JobState.FAILED and record.exit_code == 3, record
    assert members(record) == {
        "main1": ("completed", False),
        "worker1": ("failed", False),
        "worker2": ("completed", False),
    }
    assert not any(line.endswith("\tstopped") for line in exits(record))


# ---- restart ---------------------------------------------------------------------------------


def test_restart_runs_every_member_again_as_the_same_job(engine: Engine) -> None:
    """Each member appends a line to its own file in the job directory: after the restart
    every member has run twice, under the same gateway job and native id."""
    me = "$IRI_CLUSTER_ROLE$IRI_CLUSTER_ROLE_INDEX"
    line = f'echo "run {me}" >> "runs-{me}"'
    record, _ = run(engine, cluster(line, f"{line}; sleep 1", "all_must_end"))
    assert record.state == JobState.COMPLETED, record
    native_id = record.native_id
    restarted = engine.restart(owner="alice", job_id=record.id)
    assert restarted.state == JobState.QUEUED and restarted.exit_code is None
    assert restarted.members == [] and restarted.message == "restart 1: local restart of " + (
        str(native_id)
    )
    record = wait_for(engine, record.id, lambda r: r.state.final and bool(r.members))
    assert record.state == JobState.COMPLETED and record.native_id == native_id, record
    directory = Path(record.effective_spec["directory"])
    for name in ("main1", "worker1", "worker2"):
        assert (directory / f"runs-{name}").read_text() == f"run {name}\nrun {name}\n"
    states = [entry["state"] for entry in record.history]
    assert states.count("completed") == 2 and states.count("queued") >= 2, record.history
    restart_entry = next(e for e in record.history if e["message"].startswith("restart 1"))
    assert restart_entry["state"] == "queued"


def test_restart_of_a_running_cluster_stops_it_first(engine: Engine) -> None:
    line = 'echo "run" >> "runs-$IRI_CLUSTER_ROLE$IRI_CLUSTER_ROLE_INDEX"; sleep 300'
    record = engine.submit(owner="alice", resource_id="local", spec=cluster(line, line)).record
    record = wait_for(engine, record.id, lambda r: len(r.members) == 3)
    directory = Path(record.effective_spec["directory"])
    until = time.monotonic() + 20
    while not all((directory / f"runs-{n}").exists() for n in ("main1", "worker1", "worker2")):
        assert time.monotonic() < until
        time.sleep(0.1)
    engine.restart(owner="alice", job_id=record.id)
    until = time.monotonic() + 20
    while not all(
        (directory / f"runs-{n}").exists() and (directory / f"runs-{n}").read_text() == "run\nrun\n"
        for n in ("main1", "worker1", "worker2")
    ):
        assert time.monotonic() < until, "the members did not run again"
        time.sleep(0.1)
    record = wait_for(engine, record.id, lambda r: r.state == JobState.ACTIVE)
    engine.cancel(owner="alice", job_id=record.id)
    record = wait_for(engine, record.id, lambda r: r.state.final)
    assert record.state == JobState.CANCELED


def test_a_job_not_sent_yet_cannot_be_restarted(engine: Engine) -> None:
    from iri_gateway.service.jobs.engine import JobNotChangeableError

    record = engine.store.create(
        owner="alice", resource_id="local", spec={}, effective_spec={}, plan={}, script="true"
    )
    with pytest.raises(JobNotChangeableError, match="has not reached the scheduler"):
        engine.restart(owner="alice", job_id=record.id)
