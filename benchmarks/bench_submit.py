"""Submission overhead: N jobs through the gateway's submit path vs plain `sbatch`.

Needs the test cluster (`scripts/cluster start`). Both sides submit the same rendered
scripts to the same Slurm, held (`--hold` is added to both) so nothing runs while measuring;
everything is cancelled afterwards. The gateway side is `Engine.submit`: validate, plan,
record in SQLite, create the job folder, sbatch with the tag, record the id.

    SLURM_CONF=/tmp/iri-cluster/slurm.conf python benchmarks/bench_submit.py --jobs 100

Target (issue #3): gateway / plain <= 1.15.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

from iri_gateway.backends import Backends
from iri_gateway.engine import Engine
from iri_gateway.jobspec_io import parse_jobspec
from iri_gateway.planner import make_plan
from iri_gateway.profiles import ProfileRegistry
from iri_gateway.schedulers.slurm import sbatch
from iri_gateway.store import JobStore

ROOT = Path(__file__).parent.parent
JOB = {"executable": "/bin/true", "attributes": {"duration": 60},
       "resources": {"exclusive_node_use": False}}


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
        engine = Engine(registry=registry, store=JobStore(f"sqlite:///{data}/jobs.db"),
                        backends=Backends(data))
        loaded = registry.get("cluster")
        spec = parse_jobspec(JOB)
        held = "#!/bin/bash\n#SBATCH --hold\n"
        script = make_plan(spec, loaded).script.replace("#!/bin/bash\n", held, 1)
        native: list[str] = []

        held_spec = parse_jobspec(JOB)
        backend = engine.backends.get(loaded, "bench")
        original = backend.batch.submit

        def submit_held(text: str, *, tag: str) -> str:
            return original(text.replace("#!/bin/bash\n", held, 1), tag=tag)

        backend.batch.submit = submit_held  # type: ignore[method-assign]
        # Interleaved, so a queue that grows during the run weighs on both sides alike.
        plain = gateway = 0.0
        for index in range(args.jobs):
            start = time.perf_counter()
            done = subprocess.run(sbatch.argv(f"plain:{index}"), input=script,
                                  capture_output=True, text=True, check=True)
            plain += time.perf_counter() - start
            native.append(done.stdout.strip())
            start = time.perf_counter()
            record = engine.submit(owner="bench", resource_id="cluster", spec=held_spec).record
            gateway += time.perf_counter() - start
            native.append(record.native_id or "")
        subprocess.run(["scancel", *native], capture_output=True, check=False)
    print(f"jobs: {args.jobs}")
    print(f"plain sbatch:   {plain:.2f} s ({plain / args.jobs * 1000:.1f} ms/job)")
    print(f"gateway submit: {gateway:.2f} s ({gateway / args.jobs * 1000:.1f} ms/job)")
    print(f"ratio gateway/plain: {gateway / plain:.2f} (target <= 1.15)")


if __name__ == "__main__":
    main()
