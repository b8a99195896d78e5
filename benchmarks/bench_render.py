"""Validate + negotiate + render throughput, per shipped profile, on one core.

Each iteration does what a dry run or a submission does for one request: validate a JobSpec
document (a decoded JSON dict) into the model, negotiate it on the resource, render the
batch script. The job is a representative GPU+MPI container job with a mount, environment
and arguments, sized to fit each resource.

    python benchmarks/bench_render.py [--seconds 2]

Target (issue #2): >= 10,000 jobs/s on one core of the 2-core CI machine.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.negotiate import negotiate
from iri_gateway.planning.render import render_script
from iri_gateway.profiles.loading import ProfileRegistry

CASES: dict[str, tuple[str, str]] = {
    # resource: (image, mount source prefix)
    "perlmutter-gpu": ("docker.io/nvidia/cuda:12.4.0-runtime-ubuntu22.04", "/pscratch/sd/u/user"),
    "frontier": ("/lustre/orion/proj/images/app.sif", "/lustre/orion/proj"),
    "polaris": ("/eagle/proj/images/app.sif", "/eagle/proj"),
    "aurora": ("/flare/proj/images/app.sif", "/flare/proj"),
}


def job(image: str, mount: str) -> dict[str, Any]:
    return {
        "name": "bench-gpu-mpi",
        "executable": "/opt/app/bin/solver",
        "arguments": ["--config", "/input/config.yaml", "--steps", "1000", "--tag", "it's"],
        "directory": f"{mount}/run",
        "environment": {"OMP_NUM_THREADS": "8", "APP_MODE": "production"},
        "stdout_path": "solver.out",
        "launcher": "mpiexec",
        "resources": {
            "node_count": 2,
            "processes_per_node": 4,
            "gpu_cores_per_process": 1,
            "cpu_cores_per_process": 8,
        },
        "attributes": {"duration": 3600, "account": "proj123"},
        "container": {
            "image": image,
            "volume_mounts": [{"source": f"{mount}/input", "target": "/input"}],
        },
    }


def measure(document: dict[str, Any], resource: Any, seconds: float) -> tuple[float, int]:
    for _ in range(200):  # warm caches (templates compile once)
        render_script(negotiate(parse_jobspec(document), resource))
    count, start = 0, time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(100):
            render_script(negotiate(parse_jobspec(document), resource))
        count += 100
        now = time.perf_counter()
        if now >= deadline:
            return count / (now - start), count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per resource")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    registry = ProfileRegistry.builtin()
    table = Table(title="validate + negotiate + render, one core")
    for column in ("resource", "runtime", "jobs/s", "µs/job", "jobs run"):
        table.add_column(column, justify="right" if column != "resource" else "left")
    for resource_id, (image, mount) in CASES.items():
        loaded = registry.get(resource_id)
        document = job(image, mount)
        runtime = negotiate(parse_jobspec(document), loaded).runtime
        rate, count = measure(document, loaded, args.seconds)
        table.add_row(resource_id, runtime, f"{rate:,.0f}", f"{1e6 / rate:.0f}", f"{count:,}")
    Console().print(table)


if __name__ == "__main__":
    main()
