"""Short image names under real Podman on the test cluster: they mean Docker Hub's image.

`lab/app:tag` is Docker Hub's `docker.io/lab/app:tag` for Docker, Apptainer and Shifter. Podman
given the bare name pulls nothing without a search registry, and among local images it takes
`localhost/lab/app:tag` first. The test puts both in root's store (the cluster's Slurm jobs run
as root): the test cluster's cuda image tagged as the Docker Hub name, its cpu image as the
`localhost/` one. Each image's `/etc/iri-flavour` names it, so the job's output proves that the
gateway qualified the name and Podman ran Docker Hub's image; with the bare name it would print
`cpu`.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator

import pytest

from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.service.jobs.engine import Engine
from tests.integration.conftest import ClusterInfo, wait_all_final

pytestmark = pytest.mark.integration


def podman(*args: str) -> None:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (args, done.stdout, done.stderr)


@pytest.fixture
def short_name(cluster: ClusterInfo) -> Iterator[str]:
    """A short name (unique to this run) whose Docker Hub image is the cuda test image and
    whose `localhost/` image is the cpu one; both names are removed afterwards."""
    short = f"iri-short-{uuid.uuid4().hex[:8]}/app:v1"
    hub, local = f"docker.io/{short}", f"localhost/{short}"
    podman("tag", cluster.image_cuda, hub)
    podman("tag", cluster.image_cpu, local)
    try:
        yield short
    finally:
        podman("untag", hub, hub)
        podman("untag", local, local)


def test_a_short_name_runs_docker_hubs_image_under_podman(
    cluster_engine: Engine, short_name: str
) -> None:
    spec = parse_jobspec(
        {
            "executable": "/bin/cat",
            "arguments": ["/etc/iri-flavour"],
            "container": {"runtime": "podman", "image": short_name},
        }
    )
    record = cluster_engine.submit(owner="root", resource_id="cluster", spec=spec).record
    assert record.native_id, record
    assert record.plan["image"] == f"docker.io/{short_name}"
    assert f"docker.io/{short_name}" in record.script
    done = wait_all_final(cluster_engine, [record.id])[record.id]
    stderr = cluster_engine.read_output(owner="root", job_id=record.id, stream="stderr")
    assert done.state == JobState.COMPLETED and done.exit_code == 0, (done, stderr)
    assert cluster_engine.read_output(owner="root", job_id=record.id) == "cuda\n"
