"""End to end over HTTP: a real `iri-gateway serve` on the real Slurm test cluster.

A Podman container job goes in through the official launchJob, the server's own poller
tracks it to `completed`, and its output comes back through the official filesystem `tail`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from iri_gateway.client import GatewayClient
from tests.integration.gateway_process import serve

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served(
    cluster_profile: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """A real `serve` on the cluster profile: its URL and a token for alice (proj1)."""
    folder = tmp_path_factory.mktemp("gateway")
    with serve(cluster_profile, folder / "data") as gateway:
        yield gateway.url, gateway.token


@pytest.fixture(scope="module")
def server(served: tuple[str, str]) -> Iterator[GatewayClient]:
    with GatewayClient(*served) as client:
        yield client


def test_podman_job_through_the_official_api(server: GatewayClient) -> None:
    job = server.submit(
        "cluster",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", "echo from the container; cat /etc/hostname > /dev/null"],
            "environment": {"GREETING": "hi"},
            "container": {"image": "localhost/iri-test/busybox:latest", "network": "none"},
        },
        project="proj1",
    )
    assert job.state in ("queued", "active", "completed")
    done = server.wait("cluster", job.id, timeout=120)
    assert done.state == "completed", done
    assert done.exit_code == 0
    path = f"{done.meta_data['directory']}/{done.meta_data['stdout_path']}"
    assert server.tail("cluster", path, lines=5).content == "from the container\n"
    assert server.output("cluster", job.id) == "from the container\n"


def test_failed_and_canceled_over_http(server: GatewayClient) -> None:
    failing = server.submit(
        "cluster", {"executable": "/bin/sh", "arguments": ["-c", "exit 4"]}, project="proj1"
    )
    sleeper = server.submit(
        "cluster", {"executable": "/bin/sleep", "arguments": ["120"]}, project="proj1"
    )
    assert server.wait("cluster", failing.id, timeout=120).exit_code == 4
    server.cancel("cluster", sleeper.id)
    assert server.wait("cluster", sleeper.id, timeout=120).state == "canceled"


def test_psij_program_on_the_slurm_cluster(served: tuple[str, str]) -> None:
    """A PSI/J program submits to Slurm through the gateway: callbacks see ACTIVE then
    COMPLETED; a second job is cancelled."""
    from psij import Job, JobExecutor, JobSpec, JobState, JobStatus

    from iri_gateway.psij_executor import IriExecutorConfig

    url, token = served
    config = IriExecutorConfig(resource="cluster", project="proj1", token=token, poll_interval=0.3)
    executor = JobExecutor.get_instance("iri", url=url, config=config)
    seen: list[JobState] = []

    def record(job: Job, status: JobStatus) -> None:
        seen.append(status.state)

    job = Job(JobSpec("/bin/sh", ["-c", "sleep 2; echo from psij"]))
    job.set_job_status_callback(record)
    executor.submit(job)
    final = job.wait(timeout=None)
    assert final is not None and final.state == JobState.COMPLETED, final
    assert JobState.ACTIVE in seen and seen[-1] == JobState.COMPLETED
    assert seen.index(JobState.ACTIVE) < seen.index(JobState.COMPLETED)
    with GatewayClient(url, token) as gateway:
        assert gateway.output("cluster", job.native_id) == "from psij\n"

    sleeper = Job(JobSpec("/bin/sleep", ["120"]))
    executor.submit(sleeper)
    sleeper.wait(target_states=[JobState.ACTIVE, JobState.COMPLETED, JobState.FAILED])
    executor.cancel(sleeper)
    ended = sleeper.wait()
    assert ended is not None and ended.state == JobState.CANCELED, ended
