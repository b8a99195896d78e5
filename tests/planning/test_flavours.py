"""Image flavours: selection per resource, placement, validation, and manifest import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.errors import InvalidJobSpecError, ManifestError
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.placement import place
from iri_gateway.profiles.flavour_manifest import import_manifest
from iri_gateway.profiles.loading import ProfileRegistry
from tests.conftest import plan_for, problems_for

CUDA_IMAGE = "docker.io/lab/app:1.0-cuda"
CPU_IMAGE = "docker.io/lab/app:1.0-cpu"


def app_job(**container: Any) -> dict[str, Any]:
    """The motivating app: a CUDA flavour for big NVIDIA nodes, a CPU flavour for the rest."""
    return {
        "executable": "/app/run",
        "attributes": {"duration": 600, "account": "m1234"},
        "container": {
            "flavours": [
                {
                    "name": "cuda",
                    "image": CUDA_IMAGE,
                    "priority": 100,
                    "requirements": [{"gpu_count": ">= 2"}, {"nvidia_cuda": "> 11"}],
                },
                {
                    "name": "cpu",
                    "image": CPU_IMAGE,
                    "priority": 20,
                    "requirements": {"cpu_mhz": "> 1400"},
                },
            ],
            **container,
        },
    }


def outcomes(plan: Any) -> dict[str, tuple[str, str | None]]:
    return {f.name: (f.status, f.reason) for f in plan.flavours}


def test_cuda_on_perlmutter_gpu(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, "perlmutter-gpu", app_job())
    assert plan.flavour == "cuda"
    assert plan.image == CUDA_IMAGE and CUDA_IMAGE in plan.script and CPU_IMAGE not in plan.script
    assert outcomes(plan) == {
        "cuda": ("chosen", None),
        "cpu": ("outranked", "'cuda' (priority 100) was chosen"),
    }
    # Built for GPUs, so its container gets them, and the user is told none are reserved.
    assert plan.gpu is not None and plan.gpu.flags == ["--gpu"]
    assert any("gpu_cores_per_process" in warning for warning in plan.warnings)


def test_cpu_on_perlmutter_cpu(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, "perlmutter-cpu", app_job())
    assert plan.flavour == "cpu" and plan.image == CPU_IMAGE
    assert plan.gpu is None
    assert outcomes(plan)["cuda"] == ("rejected", "gpu_count >= 2: perlmutter-cpu has gpu_count 0")
    assert CUDA_IMAGE not in plan.script


def test_cpu_on_frontier_whose_gpus_are_amd(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, "frontier", app_job())
    assert plan.flavour == "cpu"
    assert plan.image == f"docker://{CPU_IMAGE}", "apptainer's form of the chosen image"
    assert outcomes(plan)["cuda"] == ("rejected", "nvidia_cuda > 11: frontier has no nvidia_cuda")


def test_placement_ranks_every_resource_with_reasons(registry: ProfileRegistry) -> None:
    ranked = place(parse_jobspec(app_job()), registry)
    assert registry.ids() == [
        "aurora",
        "polaris",
        "cdi-gpu",
        "oci-cpu",
        "lanl-gpu",
        "lanl-cpu",
        "local",
        "perlmutter-gpu",
        "perlmutter-cpu",
        "frontier",
        "testsite-gpu",
    ]
    # cuda (100) first, in load order; then cpu (20) in load order; then what cannot run it.
    assert [(p.resource, p.flavour) for p in ranked] == [
        ("polaris", "cuda"),
        ("lanl-gpu", "cuda"),
        ("perlmutter-gpu", "cuda"),
        ("testsite-gpu", "cuda"),
        ("aurora", "cpu"),
        ("cdi-gpu", "cpu"),
        ("oci-cpu", "cpu"),
        ("lanl-cpu", "cpu"),
        ("perlmutter-cpu", "cpu"),
        ("frontier", "cpu"),
        ("local", None),
    ]
    by_id = {p.resource: p for p in ranked}
    # cdi-gpu refuses GPUs the job does not count (gpu_default_request: refuse).
    assert [(f.name, f.status) for f in by_id["cdi-gpu"].flavours] == [
        ("cuda", "rejected"),
        ("cpu", "chosen"),
    ]
    assert "none are reserved" in (by_id["cdi-gpu"].flavours[0].reason or "")
    assert by_id["perlmutter-gpu"].priority == 100 and by_id["frontier"].priority == 20
    assert by_id["perlmutter-gpu"].runtime == "podman-hpc" and by_id["frontier"].queue == "batch"
    local = by_id["local"]
    assert not local.runnable and ranked[-1] is local
    assert [(p.name, p.reason) for p in local.problems] == [
        (
            "container.flavours[0].requirements",
            "flavour 'cuda': gpu_count >= 2: local has gpu_count 0",
        ),
        (
            "container.flavours[1].requirements",
            "flavour 'cpu': cpu_mhz > 1400: local has no cpu_mhz",
        ),
    ]


def test_highest_priority_wins_and_ties_go_to_declaration_order(
    registry: ProfileRegistry,
) -> None:
    flavours = [
        {"name": "first", "image": CPU_IMAGE, "priority": 5},
        {"name": "second", "image": CUDA_IMAGE, "priority": 5},
        {"name": "low", "image": CPU_IMAGE, "priority": 1},
    ]
    plan = plan_for(
        registry,
        "perlmutter-cpu",
        {
            "executable": "/app/run",
            "container": {"flavours": flavours},
        },
    )
    assert plan.flavour == "first"
    assert [f.status for f in plan.flavours] == ["chosen", "outranked", "outranked"]
    flavours[2]["priority"] = 9
    assert (
        plan_for(
            registry,
            "perlmutter-cpu",
            {
                "executable": "/app/run",
                "container": {"flavours": flavours},
            },
        ).flavour
        == "low"
    )


def test_a_flavour_whose_job_cannot_run_falls_to_the_next(registry: ProfileRegistry) -> None:
    # The best flavour fits the hardware but asks for a runtime the resource lacks.
    document = app_job()
    document["container"]["flavours"][0]["runtime"] = "apptainer"
    plan = plan_for(registry, "perlmutter-gpu", document)
    assert plan.flavour == "cpu"
    status, reason = outcomes(plan)["cuda"]
    assert status == "rejected"
    assert reason is not None and reason.startswith("container.flavours[0].runtime: ")
    assert "does not offer runtime 'apptainer'" in reason


def test_nothing_fits_names_every_flavour(registry: ProfileRegistry) -> None:
    problems = problems_for(registry, "local", app_job())
    assert [p.field for p in problems] == [
        "container.flavours[0].requirements",
        "container.flavours[1].requirements",
    ]


def test_container_image_is_the_fallback_when_no_flavour_fits(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, "local", app_job(image="docker.io/lab/app:1.0-generic"))
    assert plan.flavour is None and plan.image == "docker.io/lab/app:1.0-generic"
    assert plan.warnings[0] == "no flavour fits local; container.image is used"
    assert [f.status for f in plan.flavours] == ["rejected", "rejected"]


def test_flavour_options_add_to_the_jobs_and_are_checked(registry: ProfileRegistry) -> None:
    document = app_job(extra_options={"podman-hpc": ["--read-only"]})
    document["container"]["flavours"][1]["extra_options"] = {"podman-hpc": ["--privileged"]}
    problems = problems_for(registry, "perlmutter-cpu", document)
    assert "container.flavours[1].extra_options.podman-hpc[1]" in [p.field for p in problems]


def test_explicit_gpu_false_is_kept_for_a_gpu_flavour(registry: ProfileRegistry) -> None:
    plan = plan_for(registry, "perlmutter-gpu", app_job(gpu=False))
    assert plan.flavour == "cuda" and plan.gpu is None
    assert not any("gpu_cores_per_process" in warning for warning in plan.warnings)


@pytest.mark.parametrize(
    ("flavours", "field", "reason"),
    [
        (
            [{"name": "a", "image": "x", "requirements": {"gpu_count": ">= two"}}],
            "container.flavours[0].requirements",
            "gpu_count is a number; 'two' is not",
        ),
        (
            [{"name": "a", "image": "x", "requirements": [{"gpu_vendor": "> amd"}]}],
            "container.flavours[0].requirements",
            "gpu_vendor is a name and has no order",
        ),
        (
            [{"name": "a", "image": "x", "requirements": [{"a": "1", "b": "2"}]}],
            "container.flavours[0].requirements",
            "requirements[0] must be a mapping of one fact",
        ),
        ([{"name": "a", "image": "x"}, {"name": "a", "image": "y"}], "container", "given twice: a"),
        ([{"name": "a b", "image": "x"}], "container.flavours[0].name", "pattern"),
        (
            [{"name": "a", "image": "x", "color": "red"}],
            "container.flavours[0].color",
            "unknown field",
        ),
    ],
)
def test_malformed_flavours_are_refused_naming_flavour_and_fact(
    flavours: list[dict[str, Any]], field: str, reason: str
) -> None:
    with pytest.raises(InvalidJobSpecError) as caught:
        parse_jobspec({"executable": "/x", "container": {"flavours": flavours}})
    problems = caught.value.problems
    assert [p.field for p in problems] == [field]
    assert reason in problems[0].reason


def test_image_or_flavours_is_required() -> None:
    with pytest.raises(InvalidJobSpecError) as caught:
        parse_jobspec({"executable": "/x", "container": {"flavours": []}})
    assert "image is required unless flavours are given" in caught.value.problems[0].reason


def test_a_fact_no_resource_defines_is_refused_with_the_closest_names(
    registry: ProfileRegistry,
) -> None:
    document = {
        "executable": "/x",
        "container": {
            "flavours": [
                {
                    "name": "cuda",
                    "image": CUDA_IMAGE,
                    "requirements": {"gpu_cout": ">= 2", "nvidia_cuda": "> 11"},
                },
                {"name": "ib", "image": CPU_IMAGE, "requirements": {"infiniband": "exists"}},
            ]
        },
    }
    spec = parse_jobspec(document)
    with pytest.raises(InvalidJobSpecError) as caught:
        place(spec, registry)
    cout, infiniband = caught.value.problems
    assert str(cout) == (
        "container.flavours[0].requirements.gpu_cout: flavour 'cuda': no loaded resource "
        "defines the fact 'gpu_cout'; the closest known facts are offered (offered: gpu_count)"
    )
    assert infiniband.field == "container.flavours[1].requirements.infiniband"
    assert infiniband.reason == (
        "flavour 'ib': no loaded resource defines the fact "
        "'infiniband'; the known facts are offered"
    )
    assert infiniband.offered is not None and "cpu_mhz, gpu_count" in infiniband.offered
    # Planning on one resource (and so launching) refuses it too.
    problems = problems_for(registry, "perlmutter-cpu", document)
    assert problems[0].field == "container.flavours[0].requirements.gpu_cout"
    assert problems[0].offered == "gpu_count"


def test_site_labels_are_facts(registry: ProfileRegistry) -> None:
    document = {
        "executable": "/x",
        "container": {
            "flavours": [
                {
                    "name": "ss11",
                    "image": CPU_IMAGE,
                    "requirements": {"interconnect": "slingshot-11"},
                },
            ]
        },
    }
    assert plan_for(registry, "perlmutter-cpu", document).flavour == "ss11"


MANIFEST = """\
name: app
version: "1.0"
flavours:
  cuda:
    priority: 100
    image: docker.io/lab/app:1.0-cuda
    requirements:
      - gpu_count: ">= 2"
      - nvidia_cuda: "> 11"
  cpu:
    priority: 20
    image: docker.io/lab/app:1.0-cpu
    requirements:
      - cpu_mhz: "> 1400"
"""


def test_manifest_import(tmp_path: Path) -> None:
    manifest = tmp_path / "app.yaml"
    manifest.write_text(MANIFEST)
    imported = import_manifest(manifest)
    flavours = imported.flavours
    assert imported.app is not None and (imported.app.name, imported.app.version) == ("app", "1.0")
    assert [(f.name, f.priority, f.image, f.requirements) for f in flavours] == [
        ("cuda", 100, CUDA_IMAGE, {"gpu_count": ">= 2", "nvidia_cuda": "> 11"}),
        ("cpu", 20, CPU_IMAGE, {"cpu_mhz": "> 1400"}),
    ]


def test_manifest_errors_name_file_line_flavour_and_fact(tmp_path: Path) -> None:
    manifest = tmp_path / "app.yaml"
    manifest.write_text(
        MANIFEST.replace('"> 1400"', '"> fast"').replace(
            "    priority: 100\n", "    priority: high\n"
        )
    )
    with pytest.raises(ManifestError) as caught:
        import_manifest(manifest)
    text = str(caught.value)
    assert f"{manifest}:5: flavours.cuda.priority:" in text
    assert (
        f"{manifest}:14: flavours.cpu.requirements.cpu_mhz: cpu_mhz is a number; 'fast' "
        "is not" in text
    )


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "iri_gateway", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_import_into_a_job_then_placement(tmp_path: Path) -> None:
    manifest = tmp_path / "app.yaml"
    manifest.write_text(MANIFEST)
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"executable": "/app/run", "container": {"image": "x"}}))
    listed = run_cli("flavours", "import", str(manifest))
    assert listed.returncode == 0, listed.stderr
    assert [f["name"] for f in json.loads(listed.stdout)] == ["cuda", "cpu"]
    merged = run_cli("flavours", "import", str(manifest), "--job", str(job))
    assert merged.returncode == 0, merged.stderr
    spec = json.loads(merged.stdout)
    assert spec["container"]["image"] == "x"
    assert [f["name"] for f in spec["container"]["flavours"]] == ["cuda", "cpu"]
    job.write_text(merged.stdout)
    placed = run_cli("placement", str(job), "--json")
    assert placed.returncode == 0, placed.stderr
    answers = {p["resource"]: p for p in json.loads(placed.stdout)}
    assert answers["perlmutter-gpu"]["flavour"] == "cuda"
    assert answers["frontier"]["flavour"] == "cpu"
    table = run_cli("placement", str(job))
    assert table.returncode == 0 and "perlmutter-gpu" in table.stdout and "cuda" in table.stdout


def test_cli_placement_exit_2_when_nothing_can_run(tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"executable": "/x", "resources": {"node_count": 100_000}}))
    placed = run_cli("placement", str(job), "--json")
    assert placed.returncode == 2
    assert all(not p["runnable"] for p in json.loads(placed.stdout))


def test_cli_import_refuses_a_broken_manifest(tmp_path: Path) -> None:
    manifest = tmp_path / "app.yaml"
    manifest.write_text("flavours:\n  cuda:\n    image: x\n    requirements: [{gpu_count: '>='}]\n")
    result = run_cli("flavours", "import", str(manifest))
    assert result.returncode == 2
    assert f"{manifest}:4: flavours.cuda.requirements.gpu_count:" in result.stderr


def test_capabilities_cli_shows_hardware_facts() -> None:
    result = run_cli("capabilities", "--resource", "frontier")
    assert result.returncode == 0
    for fact in ("rocm: 6.2.4", "gpu_vendor: amd", "cpu_mhz: 2000", "runtime: apptainer, none"):
        assert fact in result.stdout


def test_nul_and_option_like_images_in_flavours_are_refused(registry: ProfileRegistry) -> None:
    nul = {
        "executable": "/x",
        "container": {
            "flavours": [{"name": "a", "image": "docker.io/lab/app\x00:1", "requirements": {}}]
        },
    }
    problems = problems_for(registry, "perlmutter-cpu", nul)
    assert ("container.flavours[0].image", "contains a NUL character") in [
        (p.field, p.reason) for p in problems
    ]
    option = {
        "executable": "/x",
        "container": {"flavours": [{"name": "a", "image": "--privileged"}]},
    }
    problems = problems_for(registry, "perlmutter-cpu", option)
    assert [p.field for p in problems] == ["container.flavours[0].image"]
