"""The engine against the real OpenPBS 23.06.06 (scripts/pbs): locally as root and through
the SSH login node as alice.

Every test submits through `Engine.submit` (plan, record, qsub) and tracks through the real
poller (one batched `qstat -f -F json` per resource and cycle), as the gateway does in
production. Jobs are submitted together and waited for together: a PBS job starts within a
second or two, and a scheduler cycle is 2 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from iri_gateway.errors import SubmitError, UpdateError
from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.schedulers.batch import JobChanges
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.jobs.poller import Poller
from iri_gateway.service.operations.store import JobRecord
from tests.integration.conftest import PbsInfo, make_engine

pytestmark = pytest.mark.integration

RESOURCES = ("pbs", "pbs-ssh")
OWNER = {"pbs": "root", "pbs-ssh": "alice"}


@pytest.fixture
def engine(pbs_engine: Engine) -> Engine:
    return pbs_engine


@pytest.fixture
def shared_dir(tmp_path: Path) -> Path:
    """A folder every account (root, alice, containers) can use."""
    folder = Path("/tmp") / f"iri-pbs-{tmp_path.name}-{os.getpid()}"
    folder.mkdir(mode=0o777, exist_ok=True)
    folder.chmod(0o777)
    return folder


def submit(engine: Engine, resource: str, document: dict[str, Any]) -> JobRecord:
    spec = parse_jobspec(document)
    return engine.submit(owner=OWNER[resource], resource_id=resource, spec=spec).record


def wait_until(
    engine: Engine,
    job_ids: list[str],
    done: Callable[[JobRecord], bool],
    timeout: float = 120,
) -> dict[str, JobRecord]:
    """Run the real poller until `done` holds for every job; fails with the states seen."""
    poller = Poller(engine)
    deadline = time.monotonic() + timeout
    seen: dict[str, list[str]] = {job_id: [] for job_id in job_ids}
    while True:
        poller.cycle(force=True)
        records: dict[str, JobRecord] = {}
        for job_id in job_ids:
            record = engine.store.get(job_id)
            assert record is not None
            records[job_id] = record
            if not seen[job_id] or seen[job_id][-1] != record.state.value:
                seen[job_id].append(record.state.value)
        if all(done(record) for record in records.values()):
            return records
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {timeout} s; states seen {seen}: {records}")
        time.sleep(0.3)


def final(engine: Engine, *records: JobRecord, timeout: float = 120) -> list[JobRecord]:
    ids = [record.id for record in records]
    done = wait_until(engine, ids, lambda r: r.state.final, timeout)
    return [done[job_id] for job_id in ids]


def output(engine: Engine, record: JobRecord, stream: str = "stdout") -> str:
    owner = record.owner
    return engine.read_output(owner=owner, job_id=record.id, stream=stream)  # type: ignore[arg-type]


def explain(engine: Engine, record: JobRecord) -> str:
    """What a failed assertion on a job shows: its record, its stdout and stderr."""
    try:
        words = f"\n--- stdout\n{output(engine, record)}\n--- stderr\n"
        return f"{record}{words}{output(engine, record, 'stderr')}"
    except Exception as error:  # the output itself may be what is missing
        return f"{record}\n(no output: {error})"


def qstat_jobs(*native_ids: str) -> dict[str, Any]:
    """`qstat -x -f -F json` as root: every job the server knows, finished ones included."""
    shown = subprocess.run(
        ["qstat", "-x", "-f", "-F", "json", *native_ids],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    jobs: dict[str, Any] = json.loads(shown.stdout).get("Jobs", {})
    return jobs


# --- lifecycle -----------------------------------------------------------------------------


def test_queued_active_completed_and_a_failure_on_both_resources(engine: Engine) -> None:
    """A job goes queued -> active -> completed on both resources, a failing one is failed
    with its exit code; the jobs run as root locally and as alice through SSH."""
    sleepers = {
        resource: submit(
            engine,
            resource,
            {
                "executable": "/bin/sh",
                "arguments": ["-c", 'sleep 3; echo "done by $(id -un) on $(hostname)"'],
                "attributes": {"duration": 120},
                "resources": {"exclusive_node_use": False},
            },
        )
        for resource in RESOURCES
    }
    failures = {
        resource: submit(
            engine,
            resource,
            {
                "executable": "/bin/sh",
                "arguments": ["-c", "echo failing >&2; exit 3"],
                "resources": {"exclusive_node_use": False},
            },
        )
        for resource in RESOURCES
    }
    for record in [*sleepers.values(), *failures.values()]:
        assert record.state == JobState.QUEUED and record.native_id, record
        assert record.native_id.endswith(".pbshost"), record.native_id
    wait_until(engine, [r.id for r in sleepers.values()], lambda r: r.state == JobState.ACTIVE)
    done = final(engine, *sleepers.values(), *failures.values())
    by_id = {record.id: record for record in done}
    for resource in RESOURCES:
        record = by_id[sleepers[resource].id]
        assert record.state == JobState.COMPLETED and record.exit_code == 0, explain(
            engine, record
        )
        states = [h["state"] for h in record.history]
        assert states.index("queued") < states.index("active") < states.index("completed")
        assert output(engine, record).startswith(f"done by {OWNER[resource]} on "), explain(
            engine, record
        )
        failed = by_id[failures[resource].id]
        assert failed.state == JobState.FAILED and failed.exit_code == 3, explain(engine, failed)
        assert output(engine, failed, "stderr") == "failing\n"
