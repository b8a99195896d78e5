"""Golden scripts: every shipped profile (and the test site) x runtime x {cpu, gpu, mpi, gpu+mpi,
roles}.

A rendered script is compared byte for byte with `tests/golden/<resource>/<runtime>-<sample>.sh`;
a refused combination with `<runtime>-<sample>.rejected` (one problem per line). After a
deliberate change, regenerate with `IRI_UPDATE_GOLDEN=1 pytest tests/planning/test_golden.py`
and read the diff. Every golden script must pass `bash -n` and `shellcheck -S warning`.

The `roles` sample is a cluster job (1 master + 3 workers, a role environment, the workers'
own image and, where the runtime allows mounts, their own read-only mount (read-write with
Charliecloud, which cannot mount read-only)); a runtime that
cannot bind the members' hosts file (Shifter) refuses it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import pytest

from iri_gateway.errors import JobRejectedError
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.planner import make_plan
from iri_gateway.profiles.check import SAMPLES, sample_job
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.runtimes import RUNTIMES
from tests.conftest import TEST_PROFILE
from tests.support.paths import TESTS

GOLDEN = TESTS / "golden"
UPDATE = os.environ.get("IRI_UPDATE_GOLDEN") == "1"

_REGISTRY = ProfileRegistry.from_files([*ProfileRegistry.builtin_files(), TEST_PROFILE])
ROLES = "roles"
ALL_SAMPLES = (*SAMPLES, ROLES)
CASES = [
    (loaded.id, runtime, sample)
    for loaded in _REGISTRY
    for runtime in [*loaded.resource.runtimes.available(), "none"]
    for sample in ALL_SAMPLES
]
# (master's image, workers' image) in the first image form a runtime takes.
_ROLE_IMAGES = {
    "oci": ("docker.io/lab/spark:3.5", "docker.io/lab/spark-worker:3.5"),
    "docker-uri": ("docker://docker.io/lab/spark:3.5", "docker://docker.io/lab/spark-worker:3.5"),
    "shifter": ("docker:lab/spark:3.5", "docker:lab/spark-worker:3.5"),
    "sif": ("/images/spark.sif", "/images/spark-worker.sif"),
    "squashfs": ("/images/spark.sqsh", "/images/spark-worker.sqsh"),
    "sandbox": ("/images/spark/", "/images/spark-worker/"),
}


def roles_job(loaded: LoadedResource, runtime: str) -> JobSpec:
    """A Spark-like cluster job: 1 master and 3 workers, the workers with their own
    environment, image and (where the runtime allows mounts) a read-only mount."""
    worker: dict[str, Any] = {
        "name": "worker",
        "count": 3,
        "arguments": ["org.apache.spark.deploy.worker.Worker", "spark://master1:7077"],
        "environment": {"SPARK_WORKER_MEMORY": "4g"},
        "ports": {"ui": 8081},
    }
    doc: dict[str, Any] = {
        "name": "check-roles",
        "executable": "/opt/spark/bin/spark-class",
        "directory": "/tmp/iri-check",
        "environment": {"SPARK_NO_DAEMONIZE": "1"},
        "roles": [
            {
                "name": "master",
                "count": 1,
                "ports": {"rpc": 7077, "ui": 8080},
                "arguments": ["org.apache.spark.deploy.master.Master", "--port", "7077"],
            },
            worker,
        ],
    }
    config = loaded.resource.runtimes.get(runtime)
    if runtime != "none" and config is not None:
        master_image, worker_image = _ROLE_IMAGES[config.image_forms[0]]
        doc["container"] = {"runtime": runtime, "image": master_image}
        worker["container"] = {"image": worker_image}
        if config.mounts.allowed_sources:
            base = config.mounts.allowed_sources[0].rstrip("/")
            worker["container"]["volume_mounts"] = [
                {
                    "source": f"{base}/iri-check/shuffle",
                    "target": "/shuffle",
                    "read_only": RUNTIMES[runtime].read_only_refusal is None,
                }
            ]
    return parse_jobspec(doc)


def _render(resource: str, runtime: str, sample: str) -> tuple[str, str]:
    loaded = _REGISTRY.get(resource)
    spec = (
        roles_job(loaded, runtime) if sample == ROLES else sample_job(sample, loaded, runtime)  # type: ignore[arg-type]  # str from CASES
    )
    try:
        return ".sh", make_plan(spec, loaded).script
    except JobRejectedError as error:
        return ".rejected", "".join(f"{problem}\n" for problem in error.problems)


@pytest.mark.parametrize(("resource", "runtime", "sample"), CASES)
def test_golden(resource: str, runtime: str, sample: str) -> None:
    suffix, text = _render(resource, runtime, sample)
    stem = GOLDEN / resource / f"{runtime}-{sample.replace('+', '-')}"
    path = stem.with_suffix(suffix)
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        for stale in (stem.with_suffix(".sh"), stem.with_suffix(".rejected")):
            stale.unlink(missing_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden {path.name}; run with IRI_UPDATE_GOLDEN=1 and review"
    assert text == path.read_text(encoding="utf-8")


def test_cpu_sample_runs_everywhere() -> None:
    rejected = [case for case in CASES if case[2] == "cpu" and _render(*case)[0] != ".sh"]
    assert rejected == []


def test_every_site_renders_gpu_and_mpi_somewhere() -> None:
    for resource in ("perlmutter-gpu", "frontier", "polaris", "aurora", "lanl-gpu"):
        rendered = {
            s
            for r, rt, s in CASES
            if r == resource and s in SAMPLES and _render(r, rt, s)[0] == ".sh"
        }
        assert rendered == set(SAMPLES), resource


@pytest.mark.parametrize(
    "resource", ["perlmutter-gpu", "frontier", "polaris", "aurora", "lanl-gpu"]
)
def test_role_goldens_of_slurm_and_pbs_sites_are_scripts(resource: str) -> None:
    """Every runtime but Shifter runs the cluster job; the script has one Slurm het
    component, or one PBS select chunk, per role, and one launch per member."""
    loaded = _REGISTRY.get(resource)
    scheduler = loaded.resource.scheduler.kind
    for runtime in [*loaded.resource.runtimes.available(), "none"]:
        golden = GOLDEN / resource / f"{runtime}-{ROLES}"
        if runtime == "shifter":
            problems = golden.with_suffix(".rejected").read_text(encoding="utf-8")
            assert "cannot bind the members' hosts file" in problems, problems
            continue
        script = golden.with_suffix(".sh").read_text(encoding="utf-8")
        lines = script.split("\n")
        if scheduler == "slurm":
            assert lines.count("#SBATCH hetjob") == 1, (resource, runtime)
            launches = [line for line in lines if line.startswith("srun --het-group=")]
            assert [line.split()[1] for line in launches] == [
                "--het-group=0",
                "--het-group=1",
                "--het-group=1",
                "--het-group=1",
            ], (resource, runtime)
        else:
            (select,) = [line for line in lines if line.startswith("#PBS -l select=")]
            assert select.startswith("#PBS -l select=1:") and "+3:" in select, select
            launches = [line for line in lines if line.startswith("mpiexec -n 1 --hosts ")]
            assert [line.split()[4] for line in launches] == [
                f'"${{iri_hosts[{index}]}}"' for index in range(4)
            ], (resource, runtime)
        assert script.count("iri_cluster_wait\n") == 1, (resource, runtime)


def test_golden_scripts_pass_bash_syntax_check() -> None:
    scripts = sorted(GOLDEN.glob("*/*.sh"))
    assert len(scripts) >= 40
    for script in scripts:
        result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, f"{script}: {result.stderr}"


def test_golden_scripts_are_shellcheck_clean() -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is required (scripts/test-all installs Debian's shellcheck)"
    scripts = [str(p) for p in sorted(GOLDEN.glob("*/*.sh"))]
    result = subprocess.run(
        [shellcheck, "-S", "warning", "-s", "bash", *scripts], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_stale_goldens() -> None:
    expected = {f"{r}/{rt}-{s.replace('+', '-')}" for r, rt, s in CASES}
    present = {f"{p.parent.name}/{p.stem}" for p in GOLDEN.glob("*/*") if p.is_file()}
    assert present == expected
