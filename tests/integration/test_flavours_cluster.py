"""Image flavours on the real test cluster: each resource runs the image it should.

One JobSpec lists two flavours, `cuda` (needs >= 2 GPUs with CUDA > 11) and `cpu` (needs a
CPU faster than 1400 MHz). The profile's `cluster-gpu` has 2 nvidia GPUs (CUDA 12.2) per node,
`cluster` and `cluster-ssh` have none. The test images each hold `/etc/iri-flavour` naming
their flavour (scripts/cluster), so the job's output proves which image really ran.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.operations.store import JobRecord
from tests.integration.conftest import ClusterInfo, wait_all_final

pytestmark = pytest.mark.integration


def flavoured_job(cluster: ClusterInfo) -> dict[str, Any]:
    return {
        "executable": "/bin/sh",
        # The flavour file of the image, and the fake GPUs the CDI spec injected (if any).
        "arguments": ["-c", 'cat /etc/iri-flavour; echo "gpus=${IRI_FAKE_GPU-}"'],
        "container": {
            "runtime": "podman",
            "flavours": [
                # The profile claims 4 GPUs a node where Slurm has 2 (on purpose, see
                # cluster-profile.yaml.in), so the flavour asks for the 2 there are itself
                # rather than the whole node's 4 the gateway would request.
                {
                    "name": "cuda",
                    "image": cluster.image_cuda,
                    "priority": 100,
                    "requirements": [{"gpu_count": ">= 2"}, {"nvidia_cuda": "> 11"}],
                    "resources": {"gpu_cores_per_process": 2},
                },
                {
                    "name": "cpu",
                    "image": cluster.image_cpu,
                    "priority": 20,
                    "requirements": {"cpu_mhz": "> 1400"},
                },
            ],
        },
    }


def outcomes(record: JobRecord) -> dict[str, dict[str, Any]]:
    return {outcome["name"]: outcome for outcome in record.plan["flavours"]}


def check_ran_flavour(
    engine: Engine,
    record: JobRecord,
    owner: str,
    chosen: str,
    chosen_image: str,
    other_image: str,
    gpus: str = "",
) -> None:
    stderr = engine.read_output(owner=owner, job_id=record.id, stream="stderr")
    assert record.state == JobState.COMPLETED and record.exit_code == 0, (record, stderr)
    assert record.plan["flavour"] == chosen
    assert record.plan["image"] == chosen_image
    assert chosen_image in record.script
    assert other_image not in record.script
    # The file inside the image names its flavour: the container that ran was the chosen one;
    # a GPU flavour's container also got the node's (fake) GPUs through CDI.
    assert engine.read_output(owner=owner, job_id=record.id) == f"{chosen}\ngpus={gpus}\n"


def test_each_resource_runs_its_best_flavour(cluster_engine: Engine, cluster: ClusterInfo) -> None:
    engine = cluster_engine
    on_gpu = engine.submit(
        owner="root", resource_id="cluster-gpu", spec=parse_jobspec(flavoured_job(cluster))
    ).record
    on_cpu = engine.submit(
        owner="root", resource_id="cluster", spec=parse_jobspec(flavoured_job(cluster))
    ).record
    for record in (on_gpu, on_cpu):
        assert record.native_id, record
    done = wait_all_final(engine, [on_gpu.id, on_cpu.id])
    on_gpu, on_cpu = done[on_gpu.id], done[on_cpu.id]

    check_ran_flavour(
        engine, on_gpu, "root", "cuda", cluster.image_cuda, cluster.image_cpu, gpus="0,1"
    )
    gpu_outcomes = outcomes(on_gpu)
    assert gpu_outcomes["cuda"]["status"] == "chosen"
    assert gpu_outcomes["cuda"]["priority"] == 100
    assert gpu_outcomes["cpu"]["status"] == "outranked"
    assert "cuda" in gpu_outcomes["cpu"]["reason"]
    # Built for GPUs: the flavour's own resources ask Slurm for the node's two GPUs.
    assert "#SBATCH --gres=gpu:2\n" in on_gpu.script
    assert on_gpu.plan["shape"]["gpus_per_process"] == 2
    assert not any("GPU" in warning for warning in on_gpu.plan["warnings"]), on_gpu.plan["warnings"]

    check_ran_flavour(engine, on_cpu, "root", "cpu", cluster.image_cpu, cluster.image_cuda)
    cpu_outcomes = outcomes(on_cpu)
    assert cpu_outcomes["cpu"]["status"] == "chosen"
    assert cpu_outcomes["cuda"]["status"] == "rejected"
    assert "gpu_count" in cpu_outcomes["cuda"]["reason"]
    assert [outcome["name"] for outcome in on_cpu.plan["flavours"]] == ["cuda", "cpu"], (
        "outcomes in declaration order"
    )


def test_flavour_over_ssh_with_rootless_podman(
    cluster_engine: Engine, cluster: ClusterInfo
) -> None:
    engine = cluster_engine
    record = engine.submit(
        owner="alice", resource_id="cluster-ssh", spec=parse_jobspec(flavoured_job(cluster))
    ).record
    assert record.native_id, record
    record = wait_all_final(engine, [record.id])[record.id]
    check_ran_flavour(engine, record, "alice", "cpu", cluster.image_cpu, cluster.image_cuda)
    assert outcomes(record)["cuda"]["status"] == "rejected"
    assert "gpu_count" in outcomes(record)["cuda"]["reason"]


def test_each_role_of_a_cluster_job_runs_its_own_flavour(
    cluster_engine: Engine, cluster: ClusterInfo
) -> None:
    """The master inherits the job's flavours and gets the CUDA image with the node's GPUs;
    the workers carry their own flavours, of which the CPU one ranks first for them."""
    engine = cluster_engine
    document = flavoured_job(cluster)
    document["attributes"] = {"duration": 300}
    document["roles"] = [
        {"name": "master", "count": 1},
        {
            "name": "worker",
            "count": 1,
            "container": {
                "flavours": [
                    {"name": "cpu", "image": cluster.image_cpu, "priority": 50},
                    {"name": "cuda", "image": cluster.image_cuda, "priority": 10},
                ]
            },
        },
    ]
    record = engine.submit(
        owner="root", resource_id="cluster-gpu", spec=parse_jobspec(document)
    ).record
    assert record.native_id, record
    record = wait_all_final(engine, [record.id], timeout=120)[record.id]
    stderr = engine.read_output(owner="root", job_id=record.id, stream="stderr")
    assert record.state == JobState.COMPLETED and record.exit_code == 0, (record, stderr)
    roles = {role["name"]: role for role in record.plan["cluster"]["roles"]}
    assert (roles["master"]["flavour"], roles["worker"]["flavour"]) == ("cuda", "cpu")
    assert (roles["master"]["gpus_per_member"], roles["worker"]["gpus_per_member"]) == (2, 0)
    # What really ran: the primary's output is the job's, the worker's is in the cluster folder.
    assert engine.read_output(owner="root", job_id=record.id) == "cuda\ngpus=0,1\n"
    folder = Path(record.effective_spec["directory"]) / f".iri-cluster-{record.native_id}"
    assert (folder / "worker1.out").read_text() == "cpu\ngpus=\n"
