"""GPUs given to a container are always reserved from the scheduler, or the job is refused.

A job with `container.gpu: true` or CDI `container.devices` but no
`resources.gpu_cores_per_process` follows the site's `scheduler.gpu_default_request`:
'whole-node' (the default) reserves every GPU of each node in the site's request form, and
the plan says so; 'refuse' rejects the job naming the field and what to add.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from iri_gateway.profiles.loading import ProfileRegistry
from tests.conftest import TEST_PROFILE, plan_for, problems_for

IMAGE = "docker.io/library/ubuntu:22.04"


def job(container: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "executable": "/bin/app",
        "container": {"image": IMAGE, **container},
    }
    document.update(overrides)
    return document


def test_gpu_true_reserves_every_gpu_of_the_node(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, "perlmutter-gpu", job({"gpu": True}))
    assert "#SBATCH --gpus-per-node=4" in plan.script.splitlines()
    assert "--gpu" in plan.script.split()
    assert plan.gpu is not None and plan.gpu.request == "whole-node"
    assert plan.gpu.gpus_per_node == 4 and plan.shape.gpus_per_node == 4
    assert plan.warnings == [
        "container.gpu: no resources.gpu_cores_per_process given; perlmutter-gpu reserves "
        "every GPU of each node (4 per node)"
    ]


def test_cdi_devices_alone_reserve_the_node_in_the_sites_form(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, "testsite-gpu", job({"devices": ["example.com/gpu=0"]}))
    assert "#SBATCH --gres=gpu:2" in plan.script.splitlines()
    assert "--device example.com/gpu=0" in plan.script
    assert plan.gpu is not None and plan.gpu.devices == ["example.com/gpu=0"]
    assert plan.gpu.request == "whole-node"


def test_pbs_asks_for_the_nodes_gpus(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, "polaris", job({"gpu": True}, resources={"node_count": 2}))
    assert "#PBS -l select=2:ncpus=32:mpiprocs=1:ngpus=4" in plan.script.splitlines()


def test_a_per_process_count_is_used_as_given(registry: ProfileRegistry) -> None:
    plan = plan_for(
        registry, "perlmutter-gpu", job({"gpu": True}, resources={"gpu_cores_per_process": 1})
    )
    assert "#SBATCH --gpus-per-task=1" in plan.script.splitlines()
    assert plan.gpu is not None and plan.gpu.request == "per-process"
    assert plan.warnings == []


def refusing_site(tmp_path: Path) -> ProfileRegistry:
    text = TEST_PROFILE.read_text().replace(
        "      gpu_request: gres\n",
        "      gpu_request: gres\n      gpu_default_request: refuse\n",
        1,
    )
    path = tmp_path / "refusing.yaml"
    path.write_text(text)
    return ProfileRegistry.from_files([path])


def test_refuse_names_the_field_and_what_to_add(tmp_path: Path) -> None:
    registry = refusing_site(tmp_path)
    (problem,) = problems_for(registry, "testsite-gpu", job({"gpu": True}))
    assert problem.field == "container.gpu"
    assert "none are reserved" in problem.reason
    assert (problem.offered or "").startswith("resources.gpu_cores_per_process")
    (problem,) = problems_for(registry, "testsite-gpu", job({"devices": ["example.com/gpu=1"]}))
    assert problem.field == "container.devices"
    plan = plan_for(
        registry, "testsite-gpu", job({"gpu": True}, resources={"gpu_cores_per_process": 1})
    )
    assert "#SBATCH --gres=gpu:1" in plan.script.splitlines()


def test_a_cluster_member_gets_its_nodes_gpus_in_its_step(registry: ProfileRegistry) -> None:
    plan = plan_for(
        registry,
        "testsite-gpu",
        job(
            {"gpu": True},
            roles=[
                {"name": "master", "count": 1},
                {"name": "worker", "count": 2},
            ],
        ),
    )
    assert plan.cluster is not None
    assert [r.gpus_per_member for r in plan.cluster.roles] == [2, 2]
    assert plan.script.count("#SBATCH --gres=gpu:2") == 2
    assert plan.script.count("--gres=gpu:2 --exact") == 3


def test_cluster_members_sharing_a_node_need_a_count(registry: ProfileRegistry) -> None:
    problems = problems_for(
        registry,
        "testsite-gpu",
        job(
            {"gpu": True},
            roles=[
                {"name": "worker", "count": 2, "resources": {"processes_per_node": 2}},
            ],
        ),
    )
    assert [p.field for p in problems] == ["roles[0].resources.gpu_cores_per_process"]
    assert problems[0].offered == "at most 1 per member"
