"""Submission overhead: N jobs through the gateway's submit path vs plain `sbatch`.

Needs the test cluster (`scripts/cluster start`). Both sides submit the same rendered
scripts to the same Slurm, held (`--hold` is added to both) so nothing runs while measuring;
everything is cancelled afterwards. Plain sbatch gets each script right after the gateway
submitted it, so the two sides differ only by the gateway's own work. The gateway side is
`Engine.submit`: validate, plan, record in SQLite, create the job folder, sbatch with the
tag, record the id.

    SLURM_CONF=/tmp/iri-cluster/slurm.conf python benchmarks/bench_submit.py --jobs 100

Target (issue #3): gateway / plain <= 1.15.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.schedulers.slurm import sbatch
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.operations.backends import Backends
from iri_gateway.service.operations.store import JobStore

ROOT = Path(__file__).parent.parent
JOB = {
    "executable": "/bin/true",
    "attributes": {"duration": 60},
    "resources": {"exclusive_node_use": False},
}


def profile(folder: Path) -> Path:
    text = (ROOT / "tests" / "integration" / "cluster-profile.yaml.in").read_text()
    for placeholder in ("@@SSH_PORT@@", "@@KNOWN_HOSTS@@", "@@SSH_KEY@@", "@@SSH_USER@@"):
        text = text.replace(placeholder, "1" if "PORT" in placeholder else "x")
    path = folder / "cluster.yaml"
    path.write_text(text)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        registry = ProfileRegistry.from_files([profile(data)])
        engine = Engine(
            registry=registry, store=JobStore(f"sqlite:///{data}/jobs.db"), backends=Backends(data)
        )
        loaded = registry.get("cluster")
        held = "#!/bin/bash\n#SBATCH --hold\n"
        native: list[str] = []

        held_spec = parse_jobspec(JOB)
        backend = engine.backends.get(loaded, "bench")
        original = backend.batch.submit

        def submit_held(text: str, *, tag: str) -> str:
            return original(text.replace("#!/bin/bash\n", held, 1), tag=tag)

        backend.batch.submit = submit_held  # type: ignore[method-assign]
        # Interleaved, so a queue that grows during the run weighs on both sides alike; the
        # plain side submits exactly the script the gateway just submitted (same directory,
        # same output files), so only the gateway's own work differs.
        plain = gateway = 0.0
        previous: str | None = None
        for index in range(args.jobs):
            # Alternate who goes first, so neither side always follows the other's sbatch.
            if index % 2 and previous is not None:
                start = time.perf_counter()
                done = subprocess.run(
                    sbatch.argv(f"plain:{index}"),
                    input=previous,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                plain += time.perf_counter() - start
                native.append(done.stdout.strip())
            start = time.perf_counter()
            record = engine.submit(owner="bench", resource_id="cluster", spec=held_spec).record
            gateway += time.perf_counter() - start
            native.append(record.native_id or "")
            previous = record.script.replace("#!/bin/bash\n", held, 1)
            if not index % 2:
                start = time.perf_counter()
                done = subprocess.run(
                    sbatch.argv(f"plain:{index}"),
                    input=previous,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                plain += time.perf_counter() - start
                native.append(done.stdout.strip())
        # The gateway's own share, without sbatch: the same path with a scheduler that
        # answers at once (validation, plan, two commits, job folder).
        backend.batch.submit = lambda text, *, tag: "0"  # type: ignore[method-assign]
        start = time.perf_counter()
        for _ in range(args.jobs):
            engine.submit(owner="bench", resource_id="cluster", spec=held_spec)
        own = time.perf_counter() - start
        subprocess.run(["scancel", *native], capture_output=True, check=False)
    print(f"jobs: {args.jobs}")
    print(f"plain sbatch:   {plain:.2f} s ({plain / args.jobs * 1000:.1f} ms/job)")
    print(f"gateway submit: {gateway:.2f} s ({gateway / args.jobs * 1000:.1f} ms/job)")
    print(f"ratio gateway/plain: {gateway / plain:.2f} (target <= 1.15)")
    print(f"gateway's own work per job (no sbatch): {own / args.jobs * 1000:.2f} ms")


if __name__ == "__main__":
    main()
