"""Status refresh of N tracked jobs: one squeue call, and how much time is the gateway's own.

Needs the test cluster (`scripts/cluster start`). Submits N held jobs to the real Slurm,
records them in a fresh store as the gateway would, then times `Engine.refresh` (the poller's
cycle for one resource) several times. The time spent waiting for squeue is measured apart,
so "gateway time" is parsing, matching and store updates.

    SLURM_CONF=/tmp/iri-cluster/slurm.conf python benchmarks/bench_status.py --jobs 1000

Target (issue #3): one call, under 0.5 s of gateway time for 1,000 active jobs.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_submit import profile

from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.operations.backends import Backends
from iri_gateway.service.operations.store import JobStore


class TimedTransport:
    """Counts and times the commands a real transport runs."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name = inner, inner.name
        self.calls: list[str] = []
        self.seconds = 0.0

    def run(self, argv: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return self.inner.run(argv, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls.append(argv[0])

    def make_directory(self, path: str) -> None:
        self.inner.make_directory(path)

    def close(self) -> None:
        self.inner.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    held = subprocess.run(
        [
            "bash",
            "-c",
            f"for i in $(seq {args.jobs}); do sbatch --parsable --hold -p all "
            "-o /dev/null --wrap true; done",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp)
            registry = ProfileRegistry.from_files([profile(data)])
            engine = Engine(
                registry=registry,
                store=JobStore(f"sqlite:///{data}/jobs.db"),
                backends=Backends(data),
            )
            for native_id in held:
                record = engine.store.create(
                    owner="bench",
                    resource_id="cluster",
                    spec={},
                    effective_spec={},
                    plan={},
                    script="",
                )
                engine.store.set_native_id(record.id, native_id, "submitted")
            batch = engine.backends.get(registry.get("cluster"), "bench").batch
            timed = TimedTransport(batch.transport)  # type: ignore[attr-defined]
            batch.transport = timed  # type: ignore[attr-defined]
            print(f"jobs tracked: {len(held)}")
            for round_ in range(args.rounds):
                timed.calls.clear()
                timed.seconds = 0.0
                start = time.perf_counter()
                changed = engine.refresh("cluster")
                total = time.perf_counter() - start
                print(
                    f"round {round_ + 1}: calls {timed.calls}, total {total:.3f} s, "
                    f"squeue {timed.seconds:.3f} s, gateway {total - timed.seconds:.3f} s, "
                    f"records changed {changed}"
                )
    finally:
        subprocess.run(["scancel", *held], capture_output=True, check=False)


if __name__ == "__main__":
    main()
