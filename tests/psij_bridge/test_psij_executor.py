"""The PSI/J `iri` executor end to end against a real `iri-gateway serve` on loopback.

The executor comes from `JobExecutor.get_instance("iri", ...)`, so PSI/J's own discovery of
`psij-descriptors/iri_descriptor.py` is exercised too. Jobs are real processes on the `local`
resource; the server is the shared `server` fixture of tests/conftest.py.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from psij import (
    InvalidJobException,
    Job,
    JobAttributes,
    JobExecutor,
    JobSpec,
    JobState,
    JobStatus,
    ResourceSpecV1,
    SubmitException,
)

from iri_gateway.client import GatewayClient
from iri_gateway.psij_executor import IriExecutorConfig, IriJobExecutor
from tests.conftest import Server

WAIT = timedelta(seconds=60)


@pytest.fixture
def executor(server: Server) -> JobExecutor:
    url, token = server.url, server.token
    config = IriExecutorConfig(resource="local", token=token, project="proj1", poll_interval=0.2)
    return JobExecutor.get_instance("iri", url=url, config=config)


@pytest.fixture
def gateway(server: Server) -> Iterator[GatewayClient]:
    with GatewayClient(server.url, server.token) as client:
        yield client


def shell(command: str, **extra: Any) -> Job:
    return Job(JobSpec("/bin/sh", ["-c", command], **extra))


def finished(job: Job) -> JobStatus:
    status = job.wait(timeout=WAIT)
    assert status is not None, f"job {job.native_id} not final after {WAIT}: {job.status}"
    return status


def test_psij_finds_the_iri_executor_through_its_descriptor(executor: JobExecutor) -> None:
    assert isinstance(executor, IriJobExecutor)  # the one class, however it was loaded
    assert executor.name == "iri" and str(executor.version) == "0.1.0"
    assert "iri" in JobExecutor.get_executor_names()


def test_a_job_runs_and_both_callbacks_see_every_state_in_order(
    executor: JobExecutor, gateway: GatewayClient
) -> None:
    job = shell("sleep 0.5; echo hi")
    seen_by_job: list[JobState] = []
    seen_by_executor: list[JobState] = []
    job.set_job_status_callback(lambda _, status: seen_by_job.append(status.state))
    executor.set_job_status_callback(lambda _, status: seen_by_executor.append(status.state))
    executor.submit(job)
    assert job.native_id is not None and job.status.state != JobState.NEW
    status = finished(job)
    assert status.state == JobState.COMPLETED and status.exit_code == 0
    expected = [JobState.QUEUED, JobState.ACTIVE, JobState.COMPLETED]
    assert seen_by_job == expected and seen_by_executor == expected
    assert gateway.output("local", job.native_id) == "hi\n"


def test_a_failing_job_ends_failed_with_its_exit_code_and_message(
    executor: JobExecutor,
) -> None:
    job = shell("exit 3")
    executor.submit(job)
    status = finished(job)
    assert status.state == JobState.FAILED and status.exit_code == 3
    assert status.message and "3" in status.message
    assert status.metadata is not None and status.metadata["iri_state"] == "failed"


def test_a_cancelled_job_ends_canceled(executor: JobExecutor) -> None:
    job = shell("sleep 60")
    executor.submit(job)
    assert job.wait(timeout=WAIT, target_states=[JobState.ACTIVE]) is not None
    started = time.monotonic()
    job.cancel()
    assert finished(job).state == JobState.CANCELED
    assert time.monotonic() - started < 30


def test_a_refused_job_raises_submit_exception_naming_the_field(
    executor: JobExecutor,
) -> None:
    job = shell("true", resources=ResourceSpecV1(node_count=100000))
    with pytest.raises(SubmitException) as caught:
        executor.submit(job)
    assert "resources.node_count" in caught.value.message
    assert caught.value.transient is False
    assert job.status.state == JobState.NEW and job.executor is None and job.native_id is None


def test_a_job_with_no_iri_form_raises_invalid_job_exception(executor: JobExecutor) -> None:
    job = shell("true", attributes=JobAttributes(custom_attributes={"iri.bogus": "x"}))
    with pytest.raises(InvalidJobException, match=r"custom_attributes\['iri\.bogus'\]"):
        executor.submit(job)
    assert job.status.state == JobState.NEW and job.executor is None


def test_the_container_from_custom_attributes_reaches_the_gateway(
    executor: JobExecutor, gateway: GatewayClient
) -> None:
    job = shell(
        "echo plain",
        attributes=JobAttributes(
            custom_attributes={
                "iri.container.image": "docker.io/library/alpine:3",
                "iri.container.runtime": "none",
            }
        ),
    )
    executor.submit(job)
    assert finished(job).state == JobState.COMPLETED
    assert job.native_id is not None
    record = gateway.status("local", job.native_id, include_spec=True)
    assert record.job_spec is not None
    container = record.job_spec["container"]
    assert (container["image"], container["runtime"]) == ("docker.io/library/alpine:3", "none")


def test_an_account_in_the_job_wins_over_the_configured_project(
    executor: JobExecutor, gateway: GatewayClient
) -> None:
    job = shell("true", attributes=JobAttributes(account="proj1"))
    executor.submit(job)  # the gateway refuses a project given twice (400)
    assert finished(job).state == JobState.COMPLETED


def test_list_and_attach_follow_a_job_submitted_elsewhere(
    executor: JobExecutor, gateway: GatewayClient
) -> None:
    other = gateway.submit(
        "local", {"executable": "/bin/sh", "arguments": ["-c", "sleep 1"]}, project="proj1"
    )
    assert other.id in executor.list()
    job = Job()
    executor.attach(job, other.id)
    assert job.native_id == other.id
    assert finished(job).state == JobState.COMPLETED
    assert other.id not in executor.list()


def test_attaching_to_an_unknown_job_raises_submit_exception(executor: JobExecutor) -> None:
    with pytest.raises(SubmitException, match="404"):
        executor.attach(Job(), "no-such-job")


def test_submitting_the_same_job_again_after_a_lost_answer_finds_the_first(
    executor: JobExecutor, gateway: GatewayClient, tmp_path: Path
) -> None:
    marker = tmp_path / "runs"
    job = shell(f"echo run >> {marker}")
    executor.submit(job)
    assert finished(job).state == JobState.COMPLETED
    # A retry of the same job (e.g. after a transient SubmitException) sends the same document
    # under the same key, its PSI/J id; a fresh Job with that id stands in for it here.
    again = Job(job.spec)
    again._id = job.id
    executor.submit(again)
    assert again.native_id == job.native_id
    assert marker.read_text() == "run\n"


def test_a_config_from_a_plain_job_executor_config_uses_the_defaults(
    server: Server,
) -> None:
    executor = IriJobExecutor(url=server.url)
    assert isinstance(executor.config, IriExecutorConfig)
    assert executor.config.resource == "local" and executor.name == "iri"
    with pytest.raises(ValueError, match="poll_interval"):
        IriExecutorConfig(poll_interval=0)


def test_no_gateway_is_a_transient_submit_exception() -> None:
    with socket.socket() as probe:  # a port nobody listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    executor = IriJobExecutor(
        url=f"http://127.0.0.1:{port}", config=IriExecutorConfig(token="t", project="p")
    )
    job = shell("true")
    with pytest.raises(SubmitException, match="No answer from the gateway") as caught:
        executor.submit(job)
    assert caught.value.transient is True and job.status.state == JobState.NEW
