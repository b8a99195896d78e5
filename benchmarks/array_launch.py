"""Arrays (issue 30): a large array into Slurm, and the poll cycle that tracks it, against raw
`sbatch --array` in the same run.

Needs the test cluster (`scripts/cluster start`, MaxArraySize above `--elements`; this script
never starts or stops it). On its `cluster` resource (local Slurm), with an in-process engine
(SQLite in a scratch folder), the array held by `begin: now+1hour` so its elements stay
waiting (never using the nodes):

1. Launch: raw `sbatch --array=0-(N-1) --begin=now+1hour` (one process, the script the
   gateway rendered), then the gateway's `Engine.submit` of the same array (plan, record,
   sbatch, answer with the native id), alternating, `--rounds` times each: the median
   seconds each until the array is in Slurm, and the ratio. Target: < 2 s for 10,000.
2. Poll: `Engine.refresh("cluster")` over that array's N waiting elements, `--rounds` cycles
   after the first (which writes the elements): median wall and CPU seconds per cycle, and
   the scheduler commands a cycle ran (the target: one). Target: < 1 s for 10,000.

Every array is cancelled at the end (scancel by name).

    SLURM_CONF=/tmp/iri-cluster/slurm.conf .venv/bin/python benchmarks/array_launch.py \\
        --elements 10000 --rounds 5

Prove it runs with small numbers: `--elements 200 --rounds 2`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_launch import cluster_profile  # noqa: E402
from iri_gateway.planning.jobspec_io import parse_jobspec  # noqa: E402
from iri_gateway.profiles.loading import ProfileRegistry  # noqa: E402
from iri_gateway.service.jobs.engine import Engine  # noqa: E402
from iri_gateway.service.operations.backends import Backends  # noqa: E402
from iri_gateway.service.operations.store import JobStore  # noqa: E402
from iri_gateway.transport.base import CommandResult  # noqa: E402

RESOURCE = "cluster"


def array_job(name: str, elements: int) -> dict[str, Any]:
    return {
        "name": name,
        "executable": "/bin/true",
        "attributes": {"duration": 60, "custom_attributes": {"begin": "now+1hour"}},
        "array": {"indices": f"0-{elements - 1}"},
    }


class CountingRun:
    """The backend transport's `run`, counting the commands a poll cycle sends."""

    def __init__(self, run: Any) -> None:
        self.run, self.commands = run, 0

    def __call__(self, *args: Any, **kwargs: Any) -> CommandResult:
        self.commands += 1
        result: CommandResult = self.run(*args, **kwargs)
        return result


def raw_sbatch(script: str, name: str) -> float:
    began = time.perf_counter()
    subprocess.run(
        ["sbatch", "--parsable", f"--job-name={name}"],
        input=script,
        text=True,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return time.perf_counter() - began


def engine_in(folder: Path) -> Engine:
    folder.mkdir()
    return Engine(
        registry=ProfileRegistry.from_files([cluster_profile(folder)]),
        store=JobStore(f"sqlite:///{folder}/jobs.db"),
        backends=Backends(folder / "data"),
    )


def launches(
    folder: Path, name: str, elements: int, rounds: int
) -> tuple[list[float], list[float]]:
    """Seconds of raw `sbatch --array` and of the gateway's submission, alternating."""
    engine = engine_in(folder)
    try:
        spec = parse_jobspec(array_job(name, elements))
        script = engine.plan(owner="root", resource_id=RESOURCE, spec=spec).script
        raw: list[float] = []
        gateway: list[float] = []
        for _ in range(rounds):
            raw.append(raw_sbatch(script, name))
            began = time.perf_counter()
            record = engine.submit(owner="root", resource_id=RESOURCE, spec=spec).record
            gateway.append(time.perf_counter() - began)
            assert record.native_id, record.message
        return raw, gateway
    finally:
        engine.close()


def poll_cycles(
    folder: Path, name: str, options: argparse.Namespace
) -> tuple[list[float], list[float], list[int]]:
    """Wall and CPU seconds, and scheduler commands, of poll cycles over one array."""
    engine = engine_in(folder)
    try:
        spec = parse_jobspec(array_job(name, options.elements))
        record = engine.submit(owner="root", resource_id=RESOURCE, spec=spec).record
        backend = engine.backends.get(engine.registry.get(RESOURCE), "root")
        counting = CountingRun(backend.transport.run)
        backend.transport.run = counting  # type: ignore[method-assign]
        engine.refresh(RESOURCE)  # the first cycle writes the array's elements
        stored = engine.store.get(record.id)
        assert stored is not None and stored.elements, "the array's elements were read"
        walls, cpus, commands = [], [], []
        for _ in range(options.rounds):
            counting.commands = 0
            wall, cpu = time.perf_counter(), time.process_time()
            engine.refresh(RESOURCE)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
            commands.append(counting.commands)
        return walls, cpus, commands
    finally:
        engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    name = f"bench-array-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        folder = Path(tmp)
        try:
            raw, gateway = launches(folder / "launch", name, options.elements, options.rounds)
            subprocess.run(["scancel", "-n", name], capture_output=True, timeout=60)
            walls, cpus, commands = poll_cycles(folder / "poll", name, options)
        finally:
            subprocess.run(["scancel", "-n", name], capture_output=True, timeout=60)
    n = options.elements
    raw_s, gateway_s = statistics.median(raw), statistics.median(gateway)
    print(f"arrays of {n} elements, {options.rounds} rounds")
    print(
        f"launch: raw sbatch --array {raw_s:.3f} s, gateway {gateway_s:.3f} s "
        f"(x{gateway_s / raw_s:.2f}); target < 2 s"
    )
    print(
        f"poll cycle over {n} waiting elements: {statistics.median(walls):.3f} s "
        f"wall, {statistics.median(cpus):.3f} s CPU, scheduler commands per cycle "
        f"{sorted(set(commands))}; target < 1 s with one query"
    )


if __name__ == "__main__":
    main()
