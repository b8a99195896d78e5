"""Placement of one 5-flavour job over 100 resources: the whole ranking, on one core.

Each iteration is one `place(spec, resources)` call, what `POST /api/v2/compute/placement`
and `iri-gateway placement` do for a request once the JobSpec is validated: negotiate the job on
every resource (trying its flavours from the highest priority down) and rank the answers.
The job has five flavours (cuda, rocm, xpu, avx512, cpu). The 100 resources are copies of
the shipped ones with distinct ids and varied hardware, so the flavours are chosen
differently: a quarter of the copies are as shipped, a quarter have GPUs with an older
toolkit (CUDA 11.0, ROCm 5.7), a quarter lose their GPUs, a quarter lose their GPUs and
keep 32 cores; copies of `local` (no cpu_mhz, 2 cores) run none of the flavours. Resource
facts are derived once per resource (as in a running gateway) during the warm-up.

    python benchmarks/bench_placement.py [--repeat 200] [--resources 100]

Target: < 5 ms per placement (median) of a 5-flavour job over 100 resources.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from typing import Any

from rich.console import Console
from rich.table import Table

from iri_gateway.models.jobspec import JobSpec
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.placement import Placement
from iri_gateway.planning.placement import place
from iri_gateway.profiles.loading import ProfileRegistry

TARGET_MS = 5.0

JOB: dict[str, Any] = {
    "name": "bench-placement",
    "executable": "/opt/app/bin/solver",
    "arguments": ["--steps", "1000"],
    "attributes": {"duration": 600, "account": "m1"},
    "container": {
        "flavours": [
            {
                "name": "cuda",
                "image": "docker.io/lab/app:1.0-cuda",
                "priority": 100,
                "requirements": [{"gpu_count": ">= 2"}, {"nvidia_cuda": "> 11"}],
            },
            {
                "name": "rocm",
                "image": "docker.io/lab/app:1.0-rocm",
                "priority": 90,
                "requirements": {"gpu_vendor": "amd", "rocm": ">= 6"},
            },
            {
                "name": "xpu",
                "image": "docker.io/lab/app:1.0-xpu",
                "priority": 80,
                "requirements": {"gpu_vendor": "intel"},
            },
            {
                "name": "avx512",
                "image": "docker.io/lab/app:1.0-avx512",
                "priority": 50,
                "requirements": {"cpu_arch": "x86_64", "cpu_cores": ">= 64"},
            },
            {
                "name": "cpu",
                "image": "docker.io/lab/app:1.0-cpu",
                "priority": 20,
                "requirements": {"cpu_mhz": "> 1400"},
            },
        ],
    },
}

VARIANTS = ("as shipped", "older GPU toolkit", "no GPUs", "no GPUs, 32 cores")


def variant(loaded: LoadedResource, index: int, kind: str) -> LoadedResource:
    """A copy of `loaded` called `<id>-<index>`, its hardware changed as `kind` says."""
    nodes = loaded.resource.nodes
    if kind == "older GPU toolkit" and nodes.gpus is not None:
        older = {"nvidia": {"cuda": "11.0"}, "amd": {"rocm": "5.7"}}.get(nodes.gpus.vendor, {})
        nodes = nodes.model_copy(update={"gpus": nodes.gpus.model_copy(update=older)})
    elif kind == "no GPUs":
        nodes = nodes.model_copy(update={"gpus": None})
    elif kind == "no GPUs, 32 cores":
        cpu = nodes.cpu.model_copy(update={"cores": min(nodes.cpu.cores, 32)})
        nodes = nodes.model_copy(update={"gpus": None, "cpu": cpu})
    resource = loaded.resource.model_copy(update={"id": f"{loaded.id}-{index}", "nodes": nodes})
    return LoadedResource(
        profile=loaded.profile,
        resource=resource,
        source=loaded.source,
        templates_dir=loaded.templates_dir,
    )


def build_resources(count: int) -> list[LoadedResource]:
    """`count` resources: the shipped ones in turn, each round with the next hardware variant."""
    shipped = list(ProfileRegistry.builtin())
    return [
        variant(shipped[i % len(shipped)], i, VARIANTS[(i // len(shipped)) % len(VARIANTS)])
        for i in range(count)
    ]


def measure(
    spec: JobSpec, resources: list[LoadedResource], repeat: int, warmup: int
) -> tuple[list[float], list[Placement]]:
    """Seconds of each of `repeat` placements (after `warmup` untimed ones), and the answer."""
    answer = place(spec, resources)
    for _ in range(warmup):
        place(spec, resources)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        answer = place(spec, resources)
        times.append(time.perf_counter() - start)
    return times, answer


def percentile(values: list[float], fraction: float) -> float:
    """The `fraction` quantile of `values` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200, help="timed placements")
    parser.add_argument("--warmup", type=int, default=20, help="untimed placements first")
    parser.add_argument("--resources", type=int, default=100, help="resources to rank")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    spec = JobSpec.model_validate(JOB)
    resources = build_resources(args.resources)
    flavours = len(spec.container.flavours) if spec.container else 0
    times, answer = measure(spec, resources, args.repeat, args.warmup)
    median_ms = statistics.median(times) * 1e3
    p95_ms = percentile(times, 0.95) * 1e3

    chosen = Counter(p.flavour for p in answer if p.runnable)
    not_runnable = sum(1 for p in answer if not p.runnable)
    table = Table(title="flavour chosen per resource")
    table.add_column("chosen flavour")
    table.add_column("resources", justify="right")
    for flavour in JOB["container"]["flavours"]:
        table.add_row(flavour["name"], str(chosen.get(flavour["name"], 0)))
    table.add_row("(not runnable)", str(not_runnable))
    Console().print(table)
    print(
        f"runnable on {len(answer) - not_runnable} of {len(answer)}; best: "
        f"{answer[0].resource} ({answer[0].flavour}); {args.repeat} timed placements, "
        f"min {min(times) * 1e3:.2f} ms, max {max(times) * 1e3:.2f} ms"
    )

    missing = [name for name in ("cuda", "cpu") if not chosen.get(name)]
    if missing or not not_runnable:
        reasons = [f"no resource chose {name!r}" for name in missing]
        if not not_runnable:
            reasons.append("every resource is runnable")
        print(f"benchmark job is not representative: {'; '.join(reasons)}", file=sys.stderr)
        sys.exit(2)

    verdict = "met" if median_ms < TARGET_MS else "MISSED"
    print(
        f"placement of a {flavours}-flavour job over {len(resources)} resources: "
        f"median {median_ms:.2f} ms, p95 {p95_ms:.2f} ms "
        f"(target < {TARGET_MS:g} ms: {verdict})"
    )


if __name__ == "__main__":
    main()
