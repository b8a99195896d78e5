"""`iri-gateway profile check`: validate a profile, then prove every resource renders.

For every resource and runtime of the profile (and bare execution), a matrix of sample jobs
(CPU, GPU, MPI, GPU+MPI, each with a mount where the site allows one) is negotiated and
rendered; each script is checked with `bash -n` and with shellcheck at warning level. A
sample the resource cannot run for a capability reason (no GPUs, no MPI binding) is reported
as unsupported; the CPU sample must run everywhere, and any script that fails a check fails
the whole profile.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iri_gateway.errors import JobRejectedError, TemplateError
from iri_gateway.models.jobspec import Container, JobSpec, ResourceSpec, VolumeMount
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.profile import RuntimeConfig
from iri_gateway.models.runtime_names import RuntimeName
from iri_gateway.planning.planner import make_plan
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.runtimes import RUNTIMES

Sample = Literal["cpu", "gpu", "mpi", "gpu+mpi"]
SAMPLES: tuple[Sample, ...] = ("cpu", "gpu", "mpi", "gpu+mpi")
Outcome = Literal["ok", "unsupported", "FAIL"]
_IMAGE_BY_FORM = {
    "oci": "docker.io/library/ubuntu:22.04",
    "docker-uri": "docker://docker.io/library/ubuntu:22.04",
    "shifter": "docker:ubuntu:22.04",
    "sif": "/images/app.sif",
    "squashfs": "/images/app.sqsh",
    "sandbox": "/images/app/",
    "oras-uri": "oras://ghcr.io/example/app:1.0",
    "library-uri": "library://example/app/app:1.0",
    "shub-uri": "shub://example/app:1.0",
}


@dataclass
class CheckRow:
    """One sample job on one resource and runtime, and what came of it."""

    resource: str
    runtime: str
    sample: Sample
    outcome: Outcome
    detail: str
    script: str | None = None


def sample_job(sample: Sample, loaded: LoadedResource, runtime: RuntimeName) -> JobSpec:
    """A representative job of kind `sample` that fits `loaded` and uses `runtime`."""
    resource = loaded.resource
    gpus = "gpu" in sample
    mpi = "mpi" in sample
    nodes = min(2, resource.nodes.count) if mpi else 1
    per_node = 1
    if mpi:
        per_node = min(resource.nodes.gpus.count, 4) if gpus and resource.nodes.gpus else 2
    container = None
    config = resource.runtimes.get(runtime)
    if runtime != "none" and config is not None:
        container = Container(
            image=_IMAGE_BY_FORM[config.image_forms[0]],
            runtime=runtime,
            volume_mounts=sample_mounts(config, runtime),
        )
    elif runtime == "none":
        container = None
    return JobSpec(
        name=f"check-{sample.replace('+', '-')}",
        executable="/opt/app/bin/app",
        arguments=["--input", "/data/in put.txt"],
        directory="/tmp/iri-check",
        environment={"OMP_NUM_THREADS": "2"},
        container=container,
        launcher="srun"
        if mpi and resource.mpi and resource.mpi.launcher == "srun"
        else ("mpiexec" if mpi else None),
        resources=ResourceSpec(
            node_count=nodes,
            processes_per_node=per_node if mpi else None,
            process_count=nodes * per_node if mpi else None,
            gpu_cores_per_process=1 if gpus else None,
        ),
    )


def sample_mounts(config: RuntimeConfig, runtime: RuntimeName) -> list[VolumeMount]:
    """A read-only data mount, or a read-write one with a runtime that cannot mount
    read-only (Charliecloud), where the site allows one."""
    sources = config.mounts.allowed_sources
    read_only = RUNTIMES[runtime].read_only_refusal is None
    if not sources or not (read_only or config.mounts.read_write):
        return []
    base = sources[0].rstrip("/") or ""
    return [VolumeMount(source=f"{base}/iri-check/data", target="/data", read_only=read_only)]


def run_matrix(registry: ProfileRegistry) -> list[CheckRow]:
    """Negotiate and render every sample on every resource and runtime."""
    rows: list[CheckRow] = []
    for loaded in registry:
        runtimes: list[RuntimeName] = [*loaded.resource.runtimes.available(), "none"]
        for runtime in runtimes:
            for sample in SAMPLES:
                spec = sample_job(sample, loaded, runtime)
                try:
                    plan = make_plan(spec, loaded)
                except JobRejectedError as error:
                    outcome: Outcome = "FAIL" if sample == "cpu" else "unsupported"
                    first = error.problems[0]
                    more = len(error.problems) - 1
                    detail = f"{first.field}: {first.reason}" + (f" (+{more} more)" if more else "")
                    rows.append(CheckRow(loaded.id, runtime, sample, outcome, detail))
                except TemplateError as error:
                    rows.append(CheckRow(loaded.id, runtime, sample, "FAIL", str(error)))
                else:
                    rows.append(CheckRow(loaded.id, runtime, sample, "ok", "", plan.script))
    return rows


def check_scripts(rows: list[CheckRow], shellcheck: str | None) -> None:
    """Run `bash -n` on each rendered script and shellcheck on all of them at once."""
    rendered = [row for row in rows if row.script is not None]
    with tempfile.TemporaryDirectory(prefix="iri-check-") as folder:
        paths: dict[str, CheckRow] = {}
        for index, row in enumerate(rendered):
            path = Path(folder) / f"{index:03d}-{row.resource}-{row.runtime}.sh"
            path.write_text(row.script or "", encoding="utf-8")
            paths[str(path)] = row
            syntax = subprocess.run(
                ["bash", "-n", str(path)], capture_output=True, text=True, check=False
            )
            if syntax.returncode != 0:
                row.outcome, row.detail = "FAIL", f"bash -n: {syntax.stderr.strip()}"
        if shellcheck is None or not paths:
            return
        result = subprocess.run(
            [shellcheck, "-S", "warning", "-s", "bash", "-f", "json1", *paths],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode not in (0, 1):
            raise RuntimeError(f"shellcheck failed to run: {result.stderr.strip()}")
        for comment in json.loads(result.stdout or '{"comments": []}')["comments"]:
            row = paths[comment["file"]]
            finding = f"shellcheck SC{comment['code']} line {comment['line']}: {comment['message']}"
            row.outcome = "FAIL"
            row.detail = f"{row.detail}; {finding}" if row.detail else finding


def find_shellcheck() -> str | None:
    """The shellcheck program on PATH, if any."""
    return shutil.which("shellcheck")
