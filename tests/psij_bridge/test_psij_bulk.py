"""The `iri` executor's `submit_many` (PSI/J has no arrays: many jobs in bulk launches)
against a real `iri-gateway serve` (the suite's `server`): each accepted job gets its native
id and every status callback as with `submit`; a job without an IRI form, and one the
gateway refuses, get their own exception and stay unsubmitted; the others run."""

from __future__ import annotations

from datetime import timedelta

import psij
from psij import Job, JobExecutor, JobSpec, JobState

from iri_gateway.client import GatewayClient
from tests.psij_bridge.test_psij_executor import executor, finished, gateway, shell

__all__ = ["executor", "gateway"]  # the fixtures


def test_submit_many_gives_each_job_its_id_and_callbacks(
    executor: JobExecutor, gateway: GatewayClient
) -> None:
    jobs = [shell(f"echo job-{index}") for index in range(6)]
    jobs[2] = Job(JobSpec("/bin/true", attributes=psij.JobAttributes(duration=timedelta(0))))
    jobs[4] = Job(JobSpec("/bin/true", resources=psij.ResourceSpecV1(node_count=64)))
    seen: dict[str, list[JobState]] = {job.id: [] for job in jobs}
    for job in jobs:
        job.set_job_status_callback(lambda job, status: seen[job.id].append(status.state))
    outcomes = executor.submit_many(jobs)  # type: ignore[attr-defined]
    assert [type(o).__name__ for o in outcomes] == [
        "NoneType",
        "NoneType",
        "InvalidJobException",
        "NoneType",
        "SubmitException",
        "NoneType",
    ]
    assert isinstance(outcomes[2], psij.InvalidJobException) and "duration" in str(outcomes[2])
    assert isinstance(outcomes[4], psij.SubmitException)
    assert "resources.node_count: 64 nodes asked" in str(outcomes[4])
    assert "[4]" not in str(outcomes[4]) and "[3]" not in str(outcomes[4])
    for refused in (jobs[2], jobs[4]):
        assert refused.native_id is None and refused.executor is None
        assert refused.status.state == JobState.NEW
    accepted = [jobs[i] for i in (0, 1, 3, 5)]
    assert len({job.native_id for job in accepted}) == 4
    for job in accepted:
        status = finished(job)
        assert status.state == JobState.COMPLETED and status.exit_code == 0
        assert seen[job.id] == [JobState.QUEUED, JobState.ACTIVE, JobState.COMPLETED]
    assert gateway.output("local", str(jobs[5].native_id)) == "job-5\n"
