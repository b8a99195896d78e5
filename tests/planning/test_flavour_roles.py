"""Image flavours in cluster jobs: each role chooses its own flavour on the resource."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.errors import InvalidJobSpecError
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.placement import place
from iri_gateway.profiles.loading import ProfileRegistry
from tests.conftest import plan_for, problems_for

CUDA = {
    "name": "cuda",
    "image": "docker.io/lab/seg:cuda",
    "priority": 100,
    "requirements": [{"gpu_count": ">= 2"}, {"nvidia_cuda": "> 11"}],
}
CPU = {
    "name": "cpu",
    "image": "docker.io/lab/seg:cpu",
    "priority": 20,
    "requirements": [{"cpu_mhz": "> 1400"}],
}


def cluster(**container: Any) -> dict[str, Any]:
    """A coordinator on the job's plain image, workers that run the app's flavours."""
    return {
        "executable": "/app/run",
        "attributes": {"duration": 600},
        "container": {"image": "docker.io/lab/coordinator:1", **container},
        "roles": [
            {"name": "coordinator", "count": 1},
            {"name": "worker", "count": 2, "container": {"flavours": [CUDA, CPU]}},
        ],
    }


def test_each_role_chooses_its_own_flavour(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, "perlmutter-gpu", cluster())
    assert plan.cluster is not None
    coordinator, worker = plan.cluster.roles
    assert (coordinator.flavour, coordinator.image) == (None, "docker.io/lab/coordinator:1")
    assert (worker.flavour, worker.image) == ("cuda", "docker.io/lab/seg:cuda")
    # The GPU flavour's members get the node's GPUs: 4 each, one member a node.
    assert worker.gpus_per_member == 4 and coordinator.gpus_per_member == 0
    assert "--gpus-per-task=4" in plan.script
    on_cpu = plan_for(registry, "perlmutter-cpu", cluster())
    assert on_cpu.cluster is not None
    assert [r.flavour for r in on_cpu.cluster.roles] == [None, "cpu"]
    assert "gpus" not in on_cpu.script


def test_the_jobs_flavours_are_every_roles_unless_a_role_names_an_image(
    registry: ProfileRegistry,
) -> None:
    document = cluster(flavours=[CUDA, CPU])
    document["container"].pop("image")
    document["roles"][0]["container"] = {"image": "docker.io/lab/coordinator:1"}
    del document["roles"][1]["container"]
    plan = plan_for(registry, "perlmutter-cpu", document)
    assert plan.cluster is not None
    assert [(r.flavour, r.image) for r in plan.cluster.roles] == [
        (None, "docker.io/lab/coordinator:1"),
        ("cpu", "docker.io/lab/seg:cpu"),
    ]


def test_placement_shows_the_choice_per_role(registry: ProfileRegistry, tmp_path: Path) -> None:
    answers = {p.resource: p for p in place(parse_jobspec(cluster()), registry)}
    assert answers["perlmutter-gpu"].role_flavours == {"coordinator": None, "worker": "cuda"}
    assert answers["perlmutter-cpu"].role_flavours == {"coordinator": None, "worker": "cpu"}
    job = tmp_path / "job.json"
    job.write_text(json.dumps(cluster()))
    table = subprocess.run(
        [sys.executable, "-m", "iri_gateway", "placement", str(job)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )
    assert "worker: cuda" in table.stdout, table.stderr


def test_a_role_whose_flavours_fit_nowhere_is_named(registry: ProfileRegistry) -> None:
    document = cluster()
    document["roles"][1]["container"] = {"flavours": [CUDA]}
    del document["container"]  # each role names its own image or flavours
    document["roles"][0]["container"] = {"image": "docker.io/lab/coordinator:1"}
    problems = problems_for(registry, "perlmutter-cpu", document)
    assert [(p.field, p.reason) for p in problems] == [
        (
            "roles[1].container.flavours[0].requirements",
            "role 'worker': flavour 'cuda': gpu_count >= 2: perlmutter-cpu has gpu_count 0",
        )
    ]


def test_a_role_flavours_unknown_fact_is_refused(registry: ProfileRegistry) -> None:
    document = cluster()
    document["roles"][1]["container"] = {
        "flavours": [{"name": "cuda", "image": "x", "requirements": {"gpu_cnt": ">= 2"}}]
    }
    with pytest.raises(InvalidJobSpecError) as caught:
        place(parse_jobspec(document), registry)
    assert [(p.field, p.offered) for p in caught.value.problems] == [
        ("roles[1].container.flavours[0].requirements.gpu_cnt", "gpu_count")
    ]


def test_members_sharing_a_node_share_its_gpus(registry: ProfileRegistry) -> None:
    document = cluster()
    document["roles"][1]["resources"] = {"processes_per_node": 2}
    plan = plan_for(registry, "perlmutter-gpu", document)
    assert plan.cluster is not None
    worker = plan.cluster.roles[1]
    assert (worker.flavour, worker.members_per_node, worker.gpus_per_member) == ("cuda", 2, 2)
    assert (
        "flavour 'cuda' needs GPUs: the whole node's 4 GPUs are requested (2 per process; "
        "set resources.gpu_cores_per_process to ask for fewer)" in plan.warnings
    )
