"""A job the real PBS can never run: the user is told it failed, in PBS's words, and the job
is gone from PBS's queue (schedulers/pbs/never_runs.py).

PBS accepts such a request at qsub and keeps it queued with the comment `Can Never Run: ...`
for ever; the stand-in could never show it (it schedules nothing). The resource
`pbs-overclaimed` claims 16 cores per node, so a 10-CPU job passes the gateway's
negotiation and reaches PBS, whose vnodes have 2.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from iri_gateway.errors import SchedulerUnavailableError
from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.schedulers.pbs.batch import PbsBatch
from iri_gateway.schedulers.pbs.never_runs import DELETED, VERDICT
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.operations.store import JobRecord
from iri_gateway.transport.base import CommandResult
from iri_gateway.transport.local import LocalTransport
from iri_gateway.transport.scripted import Answer, ScriptedTransport
from tests.integration.conftest import PbsInfo, wait_all_final

pytestmark = pytest.mark.integration


def pbs_job(native_id: str) -> dict[str, object]:
    done = subprocess.run(
        ["qstat", "-f", "-F", "json", "-x", native_id],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    job: dict[str, object] = json.loads(done.stdout)["Jobs"][native_id]
    return job


def submit(engine: Engine, name: str, processes_per_node: int) -> JobRecord:
    """A shared-node job on `pbs-overclaimed` asking for one CPU per process."""
    resources = {
        "node_count": 1,
        "processes_per_node": processes_per_node,
        "exclusive_node_use": False,
    }
    document = {
        "name": name,
        "executable": "/bin/true",
        "resources": resources,
        "attributes": {"duration": 60},
    }
    spec = parse_jobspec(document)
    return engine.submit(owner="root", resource_id="pbs-overclaimed", spec=spec).record


def test_a_job_pbs_can_never_run_fails_with_pbs_words_and_leaves_the_queue(
    pbs_engine: Engine,
) -> None:
    never = submit(pbs_engine, "never", processes_per_node=10)
    fits = submit(pbs_engine, "fits", processes_per_node=1)
    assert never.native_id and fits.native_id
    done = wait_all_final(pbs_engine, [never.id, fits.id], timeout=90)
    failed = done[never.id]
    assert failed.state is JobState.FAILED
    assert failed.message is not None
    assert f"{VERDICT}: Insufficient amount of resource: ncpus" in failed.message
    assert DELETED in failed.message
    assert failed.exit_code is None
    assert done[fits.id].state is JobState.COMPLETED, done[fits.id]
    job = pbs_job(never.native_id)
    assert job["job_state"] == "F", "deleted from the queue, not left waiting"
    assert str(job["comment"]).startswith(VERDICT)


def test_the_verdict_of_a_job_already_deleted_reads_as_failed(pbs: PbsInfo) -> None:
    """After a gateway restart between the qdel and recording the failure, PBS's history
    still says why: the job reads as failed, not canceled, and no second qdel is needed."""
    batch = PbsBatch(LocalTransport())
    script = "#!/bin/bash\n#PBS -l select=1:ncpus=99\n#PBS -l walltime=60\ntrue\n"
    native_id = batch.submit(script, tag="iri-gateway:never-runs-history")
    deadline = time.monotonic() + 60
    while VERDICT not in str(pbs_job(native_id).get("comment", "")):
        assert time.monotonic() < deadline, pbs_job(native_id)
        time.sleep(0.2)
    subprocess.run(["qdel", native_id], check=True, timeout=30)
    watched = ScriptedTransport(otherwise=LocalTransport())
    status = PbsBatch(watched).statuses([native_id])[native_id]
    assert status.state is JobState.FAILED
    assert status.reason is not None and VERDICT in status.reason
    assert [call.argv[0] for call in watched.calls] == ["qstat"]


def test_a_refused_deletion_leaves_the_job_queued_for_the_next_cycle() -> None:
    """qdel refused: reported as PBS shows it (queued, its comment kept), so a later cycle
    tries again; a PBS outage while deleting stays an outage."""
    document = json.dumps(
        {
            "pbs_server": "pbshost",
            "Jobs": {
                "7.pbshost": {
                    "job_state": "Q",
                    "substate": 10,
                    "comment": f"{VERDICT}: Insufficient amount of resource: ncpus",
                }
            },
        }
    )
    transport = ScriptedTransport()
    transport.on("qstat", reply=Answer(stdout=document))
    transport.on(
        "qdel",
        reply=Answer(stderr="qdel: Request invalid for state of job 7.pbshost\n", exit_code=168),
    )
    status = PbsBatch(transport).statuses(["7.pbshost"])["7.pbshost"]
    assert status.state is JobState.QUEUED
    assert status.reason is not None and DELETED not in status.reason
    down = ScriptedTransport()
    down.on("qstat", reply=Answer(stdout=document))
    down.on(
        "qdel",
        reply=lambda call: CommandResult(
            call.argv, 255, "", "Connection refused\nqdel: cannot connect to server pbshost\n"
        ),
    )
    with pytest.raises(SchedulerUnavailableError):
        PbsBatch(down).statuses(["7.pbshost"])
