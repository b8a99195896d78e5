"""The Arkitekt proposal's app manifest as written, its faults at their lines, and what a
GPU flavour asks of the scheduler."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from iri_gateway.errors import ManifestError
from iri_gateway.machine_facts import detect_machine
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.placement import place
from iri_gateway.profiles.flavour_manifest import import_manifest
from iri_gateway.profiles.loading import ProfileRegistry
from tests.conftest import plan_for

# The proposal's manifest, literally (issue 14, item 1).
PROPOSAL = """\
- app: segmentor
  version: 0.4.3
  flavours:
    - cuda:
        - priority: 100
        - image: jhnnsrs/segmentor:0.4.3-cuda
        - requirements:
            - gpu_count: ">= 2"
            - nvidia_cuda: ">11"
    - cpu:
        - priority: 20
        - image: jhnnsrs/segmentor:0.4.3-cpu
        - requirements:
            - cpu_mhz: ">1400"
"""

OTHER_APP = """\
- app: tracker
  version: "2.0"
  flavours:
    - cpu:
        - image: lab/tracker:2.0
"""


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "iri_gateway", *args], capture_output=True, text=True, timeout=120
    )


def test_the_proposals_manifest_imports_as_written(tmp_path: Path) -> None:
    manifest = tmp_path / "segmentor.yaml"
    manifest.write_text(PROPOSAL)
    imported = import_manifest(manifest)
    assert imported.app is not None
    assert (imported.app.name, imported.app.version) == ("segmentor", "0.4.3")
    assert [(f.name, f.priority, f.image, f.requirements) for f in imported.flavours] == [
        ("cuda", 100, "jhnnsrs/segmentor:0.4.3-cuda", {"gpu_count": ">= 2", "nvidia_cuda": ">11"}),
        ("cpu", 20, "jhnnsrs/segmentor:0.4.3-cpu", {"cpu_mhz": ">1400"}),
    ]


def test_the_proposals_manifest_placed_across_the_shipped_sites(tmp_path: Path) -> None:
    manifest = tmp_path / "segmentor.yaml"
    manifest.write_text(PROPOSAL)
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"executable": "/app/segment", "attributes": {"duration": 600}}))
    merged = run_cli("flavours", "import", str(manifest), "--job", str(job))
    assert merged.returncode == 0, merged.stderr
    document = json.loads(merged.stdout)
    assert document["container"]["app"] == {"name": "segmentor", "version": "0.4.3"}
    job.write_text(merged.stdout)
    placed = run_cli("placement", str(job), "--json")
    assert placed.returncode == 0, placed.stderr
    answers = {p["resource"]: p for p in json.loads(placed.stdout)}
    chosen = {resource: answer["flavour"] for resource, answer in answers.items()}
    # `local` measures this machine (nodes.detect): the cpu flavour (cpu_mhz > 1400) fits it
    # exactly when this machine's measured clock is above 1400 MHz.
    mhz = detect_machine().mhz
    local_flavour = "cpu" if mhz is not None and mhz > 1400 else None
    # cdi-gpu has GPUs but refuses them without a count (gpu_default_request: refuse).
    assert chosen == {
        "perlmutter-gpu": "cuda",
        "polaris": "cuda",
        "perlmutter-cpu": "cpu",
        "frontier": "cpu",
        "aurora": "cpu",
        "cdi-gpu": "cpu",
        "lanl-gpu": "cuda",
        "lanl-cpu": "cpu",
        "oci-cpu": "cpu",
        "local": local_flavour,
    }
    assert all(a["app"] == {"name": "segmentor", "version": "0.4.3"} for a in answers.values())
    assert answers["local"]["runnable"] is (local_flavour is not None)
    # The plan names the app, and the CUDA flavour gets the GPUs of the node.
    shipped = ProfileRegistry.builtin()
    plan = plan_for(shipped, "perlmutter-gpu", document)
    assert plan.app is not None and (plan.app.name, plan.app.version) == ("segmentor", "0.4.3")
    assert plan.shape.gpus_per_node == 4
    table = run_cli("placement", str(job))
    assert "Placement of segmentor 0.4.3" in table.stdout


def test_an_app_is_chosen_by_name_when_the_manifest_has_several(tmp_path: Path) -> None:
    manifest = tmp_path / "apps.yaml"
    manifest.write_text(PROPOSAL + OTHER_APP)
    with pytest.raises(ManifestError) as caught:
        import_manifest(manifest)
    assert str(caught.value) == (
        f"{manifest}:1: the manifest has 2 apps; choose one with --app: segmentor, tracker"
    )
    imported = import_manifest(manifest, "tracker")
    assert imported.app is not None and imported.app.version == "2.0"
    assert [f.image for f in imported.flavours] == ["lab/tracker:2.0"]
    unknown = run_cli("flavours", "import", str(manifest), "--app", "segmenter")
    assert unknown.returncode == 2
    assert "no app 'segmenter' in the manifest; its apps: segmentor, tracker" in unknown.stderr
    chosen = run_cli("flavours", "import", str(manifest), "--app", "segmentor")
    assert chosen.returncode == 0, chosen.stderr
    assert [f["name"] for f in json.loads(chosen.stdout)] == ["cuda", "cpu"]


def test_every_bad_constraint_is_reported_at_its_own_line(tmp_path: Path) -> None:
    manifest = tmp_path / "broken.yaml"
    manifest.write_text(PROPOSAL.replace('">= 2"', '">= two"').replace('">1400"', '"> fast"'))
    result = run_cli("flavours", "import", str(manifest))
    assert result.returncode == 2
    assert result.stderr.splitlines()[-2:] == [
        f"{manifest}:8: segmentor.flavours.cuda.requirements.gpu_count: gpu_count is a number; "
        "'two' is not",
        f"{manifest}:14: segmentor.flavours.cpu.requirements.cpu_mhz: cpu_mhz is a number; "
        "'fast' is not",
    ]


def test_other_faults_of_the_list_form_are_located(tmp_path: Path) -> None:
    manifest = tmp_path / "broken.yaml"
    manifest.write_text(
        PROPOSAL.replace("- priority: 20", "- priority: low").replace(
            "            - nvidia_cuda",
            "            - nvidia_cuda: '>11'\n            - nvidia_cuda",
        )
    )
    with pytest.raises(ManifestError) as caught:
        import_manifest(manifest)
    assert [(i.line, i.field) for i in caught.value.issues] == [
        (10, "segmentor.flavours.cuda.requirements.nvidia_cuda"),
        (12, "segmentor.flavours.cpu.priority"),
    ]
    assert caught.value.issues[0].reason == "given twice"


def test_json_jobspec_reports_every_bad_constraint() -> None:
    from iri_gateway.errors import InvalidJobSpecError

    with pytest.raises(InvalidJobSpecError) as caught:
        parse_jobspec(
            {
                "executable": "/x",
                "container": {
                    "flavours": [
                        {
                            "name": "a",
                            "image": "x",
                            "requirements": {"gpu_count": ">= two", "cpu_mhz": "fast"},
                        }
                    ]
                },
            }
        )
    reason = caught.value.problems[0].reason
    assert "gpu_count is a number; 'two' is not" in reason
    assert "cpu_mhz is a number; 'fast' is not" in reason


GPU_JOB = {
    "executable": "/app/segment",
    "attributes": {"duration": 600},
    "container": {
        "flavours": [
            {
                "name": "cuda",
                "image": "docker.io/lab/seg:cuda",
                "priority": 100,
                "requirements": {"gpu_count": ">= 2"},
            },
            {"name": "cpu", "image": "docker.io/lab/seg:cpu", "priority": 1},
        ]
    },
}


def test_a_gpu_flavour_asks_the_scheduler_for_the_nodes_gpus(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, "perlmutter-gpu", GPU_JOB)
    assert plan.flavour == "cuda"
    assert "#SBATCH --gpus-per-task=4\n" in plan.script
    assert plan.gpu is not None and plan.gpu.gpus_per_node == 4
    assert (
        "flavour 'cuda' needs GPUs: the whole node's 4 GPUs are requested (4 per process; "
        "set resources.gpu_cores_per_process to ask for fewer)"
    ) in plan.warnings
    # Two processes per node share the node's four GPUs.
    two = {**GPU_JOB, "resources": {"processes_per_node": 2, "process_count": 2}}
    plan = plan_for(registry, "perlmutter-gpu", two)
    assert "#SBATCH --gpus-per-task=2\n" in plan.script
    # Three processes on a node of four GPUs: one each, and the note says how many of four.
    three = {**GPU_JOB, "resources": {"processes_per_node": 3, "process_count": 3}}
    plan = plan_for(registry, "perlmutter-gpu", three)
    assert "#SBATCH --gpus-per-task=1\n" in plan.script
    assert (
        "flavour 'cuda' needs GPUs: 3 of the node's 4 GPUs are requested (1 per process; "
        "set resources.gpu_cores_per_process to ask for fewer)"
    ) in plan.warnings
    # PBS: ngpus in the select chunk.
    assert ":ngpus=4" in plan_for(registry, "polaris", GPU_JOB).script
    # The CPU flavour elsewhere asks for none.
    assert "gpu" not in plan_for(registry, "perlmutter-cpu", GPU_JOB).script.split("\n#", 1)[0]


def test_a_flavours_own_resources_and_launcher_apply_when_it_is_chosen(
    registry: ProfileRegistry,
) -> None:
    job = {
        **GPU_JOB,
        "container": {
            "flavours": [
                {
                    **GPU_JOB["container"]["flavours"][0],  # type: ignore[index]
                    "resources": {"gpu_cores_per_process": 1, "process_count": 2},
                    "launcher": "srun",
                },
                {
                    "name": "cpu",
                    "image": "docker.io/lab/seg:cpu",
                    "priority": 1,
                    "resources": {"cpu_cores_per_process": 8},
                },
            ]
        },
    }
    gpu = plan_for(registry, "perlmutter-gpu", job)
    assert gpu.flavour == "cuda" and gpu.shape.gpus_per_process == 1
    assert gpu.shape.process_count == 2 and gpu.launcher == "mpi"
    assert "#SBATCH --gpus-per-task=1\n" in gpu.script
    assert not any("whole node" in warning for warning in gpu.warnings)
    cpu = plan_for(registry, "perlmutter-cpu", job)
    assert cpu.flavour == "cpu" and cpu.shape.cpus_per_process == 8
    assert cpu.shape.process_count == 1 and cpu.shape.gpus_per_process == 0
    # A flavour's resource that the site refuses is reported as the flavour's own field.
    too_many = {
        **job,
        "container": {
            "flavours": [
                {
                    "name": "cuda",
                    "image": "x",
                    "requirements": {"gpu_count": ">= 2"},
                    "resources": {"gpu_cores_per_process": 64},
                }
            ]
        },
    }
    problems = place(parse_jobspec(too_many), [registry.get("perlmutter-gpu")])[0].problems
    assert [p.name for p in problems] == ["container.flavours[0].resources.gpu_cores_per_process"]


def test_status_shows_the_app_of_the_job() -> None:
    import httpx
    import respx
    from typer.testing import CliRunner

    from iri_gateway.cli.app import app

    base = "http://gateway.test"
    job = {
        "id": "j1",
        "status": {"state": "completed", "time": 1.0, "meta_data": {}},
        "attributes": {"app": {"name": "segmentor", "version": "0.4.3"}, "flavour": "cpu"},
    }
    with respx.mock(base_url=base) as mock:
        mock.get("/api/v2/compute/status/local/j1").mock(return_value=httpx.Response(200, json=job))
        shown = CliRunner().invoke(app, ["status", "j1", "-r", "local", "--server", base])
    assert shown.exit_code == 0, shown.output
    rows = [[c.strip() for c in line.split("│") if c.strip()] for line in shown.output.splitlines()]
    assert ["app", "segmentor 0.4.3"] in rows and ["flavour", "cpu"] in rows
