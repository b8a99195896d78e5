"""Bulk launch into Slurm: one launchJobs call of N specs against 16 parallel raw `sbatch`.

Needs the test cluster (`scripts/cluster start`; this script never starts or stops it). In
one run, on its `cluster` resource (local Slurm), as `bench_launch.py` measures single
launches:

1. raw: CLIENTS parallel `sbatch --hold` processes (as the gateway's own account, fed the
   script the gateway rendered for the same job) submit N jobs;
2. bulk: ONE launchJobs call with the same N JobSpecs through `iri-gateway serve` (started
   here, its own data directory, default `submit_concurrency` 16 and `response_wait` 2 s;
   `write_rate` raised and `bulk_max_specs` set to N so that no limit refuses a spec), timed
   until every job has a Slurm id (squeue by the run's job name);
3. raw again, so that a queue that grows during the run weighs on both sides (raw is the
   mean of the two).

Printed: jobs/s into Slurm for each side, the ratio bulk/raw (issue 30's target: >= 1), the
call's own time (the answer may come before every job is in Slurm: past `response_wait`
the rest are answered `new` and sent all the same), how many were answered `queued`, and
the serve process's CPU time per job (its `sbatch` children not counted). Every job is
cancelled at the end by its name.

    SLURM_CONF=/tmp/iri-cluster/slurm.conf .venv/bin/python benchmarks/bulk_launch.py \\
        --count 1000 --clients 16
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from bench_launch import RESOURCE, cluster_profile, cpu_seconds, job, raw, slurm_count

from iri_gateway.service.operations.store import JobStore
from tests.integration.gateway_process import API, serve


def bulk(url: str, headers: dict[str, str], name: str, count: int) -> tuple[float, float, int]:
    """One launchJobs call of `count` jobs named `name`: seconds until all are in Slurm, the
    call's own seconds, and how many it answered `queued`."""
    specs = json.dumps([job(name) for _ in range(count)])
    start = time.perf_counter()
    answer = httpx.post(
        f"{url}{API}/compute/jobs/{RESOURCE}",
        content=specs,
        headers={**headers, "Content-Type": "application/json"},
        timeout=600,
    )
    call = time.perf_counter() - start
    if answer.status_code != 200:
        raise SystemExit(f"launchJobs answered {answer.status_code}: {answer.text[:500]}")
    results: list[dict[str, Any]] = answer.json()
    refused = [r for r in results if r["status"] != 201]
    if refused:
        raise SystemExit(f"{len(refused)} specs refused, the first: {refused[0]}")
    queued = sum(1 for r in results if r["job"]["status"]["state"] == "queued")
    while slurm_count(name) < count:
        time.sleep(0.01)
    return time.perf_counter() - start, call, queued


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="jobs per side (N)")
    parser.add_argument("--clients", type=int, default=16, help="parallel raw sbatch")
    args = parser.parse_args()
    run = f"bench-bulk-{uuid.uuid4().hex[:8]}"
    names = [f"{run}-raw", f"{run}-bulk", f"{run}-warm"]
    env = {
        "IRI_GATEWAY_WRITE_RATE": "1000000",
        "IRI_GATEWAY_BULK_MAX_SPECS": str(max(args.count, 1000)),
        "IRI_GATEWAY_ACTIVE_JOBS_PER_USER": str(10 * args.count + 100),
    }
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        data = Path(tmp)
        profile = cluster_profile(data)
        try:
            with serve(profile, data / "serve", env=env) as server:
                headers = server.headers()
                # Warm-up (connections, first imports, the store): not measured.
                bulk(server.url, headers, names[2], args.clients)
                store = JobStore(f"sqlite:///{data}/serve/jobs.db")
                record = next(r for r in store.unsettled() if r.script)
                store.close()
                script = record.script.replace(names[2], names[0])
                first = raw("raw sbatch (before)", script, names[0], args.count, args.clients)
                print(first.line(), flush=True)
                cpu = cpu_seconds(server.pid)
                seconds, call, queued = bulk(server.url, headers, names[1], args.count)
                cpu = cpu_seconds(server.pid) - cpu
                rate = args.count / seconds
                print(
                    f"{'bulk (one call)':<22} {args.count} jobs in {seconds:.2f} s = "
                    f"{rate:6.1f} jobs/s; the call answered after {call:.2f} s with "
                    f"{queued} `queued` (the rest `new`, sent after)",
                    flush=True,
                )
                print(
                    f"serve's own CPU time: {cpu:.2f} s ({cpu / args.count * 1000:.2f} ms per "
                    "job, sbatch children not counted)",
                    flush=True,
                )
                second = raw("raw sbatch (after)", script, names[0], args.count, args.clients)
                print(second.line(), flush=True)
        finally:
            for name in names:
                subprocess.run(["scancel", "-n", name], capture_output=True, check=False)
            left = sum(slurm_count(name, "PENDING,RUNNING") for name in names)
            print(f"cancelled the run's jobs; {left} still pending or running")
    raw_rate = (first.rate + second.rate) / 2
    print(
        f"throughput bulk/raw: {rate / raw_rate:.2f} (target >= 1; raw {raw_rate:.1f} "
        f"jobs/s, the mean of {first.rate:.1f} and {second.rate:.1f})",
        flush=True,
    )


if __name__ == "__main__":
    main()
