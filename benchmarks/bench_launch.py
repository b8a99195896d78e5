"""Launch throughput and latency: a real `iri-gateway serve` vs raw `sbatch`, same cluster.

Needs the test cluster (`scripts/cluster start`; this script never starts or stops it). In
one run, on its `cluster` resource (local Slurm):

1. Concurrent: CLIENTS parallel raw `sbatch --hold` (each a process, as the gateway's own
   account, fed the very script the gateway rendered for the same job) submit JOBS jobs;
   then CLIENTS concurrent HTTP clients (keep-alive, stdlib `http.client`, one thread each)
   launch JOBS jobs through `iri-gateway serve` (started here, its own data directory, the
   default `submit_concurrency` 16 and `response_wait` 2 s); then the raw side again, so a
   queue that grows during the run weighs on both sides (raw is the mean of the two). Per
   side: jobs/s reaching the scheduler (JOBS / time until every job has a Slurm id: the
   launch answered `queued`, or else squeue shows it), launch latency p50/p99 (one `sbatch`
   process; one HTTP request), and the ratio gateway/raw.
2. Sequential (`--sequential M`): one job after another, interleaved round by round: raw
   `sbatch`, the gateway's `Engine.submit` in process (waiting for the scheduler), and
   PSI/J's Slurm executor; median per job and the ratios.

Jobs stay pending: every gateway job carries `begin: now+1hour` (allowed in a derived
profile, as the integration tests do; the figures in docs/benchmarks.md were taken that way,
before `hold: ""` rendered as a bare `--hold`); raw `sbatch` gets `--hold`. Every job
is cancelled at the end by its name (one name per side and run; PSI/J's by their Slurm ids).

    SLURM_CONF=/tmp/iri-cluster/slurm.conf .venv/bin/python benchmarks/bench_launch.py \\
        --jobs 200 --clients 16 --sequential 30

Targets (issue 13): launch throughput >= 0.9x raw with p99 < 100 ms; sequential <= 1.15x
raw and below PSI/J.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from iri_gateway.planning.jobspec_io import parse_jobspec  # noqa: E402
from iri_gateway.profiles.loading import ProfileRegistry  # noqa: E402
from iri_gateway.service.jobs.engine import Engine  # noqa: E402
from iri_gateway.service.operations.backends import Backends  # noqa: E402
from iri_gateway.service.operations.store import JobStore  # noqa: E402
from tests.integration.gateway_process import API, profile_allowing, serve  # noqa: E402

RESOURCE = "cluster"


def job(name: str) -> dict[str, Any]:
    """A job that stays pending an hour (never uses the nodes)."""
    return {
        "name": name,
        "executable": "/bin/true",
        "attributes": {"duration": 60, "custom_attributes": {"begin": "now+1hour"}},
        "resources": {"exclusive_node_use": False},
    }


def cluster_profile(folder: Path) -> Path:
    """The test cluster's profile (its local `cluster` resource needs no SSH), `begin`
    allowed."""
    text = (ROOT / "tests" / "integration" / "cluster-profile.yaml.in").read_text()
    for placeholder in ("@@SSH_PORT@@", "@@KNOWN_HOSTS@@", "@@SSH_KEY@@", "@@SSH_USER@@"):
        text = text.replace(placeholder, "1" if "PORT" in placeholder else "x")
    path = folder / "cluster.yaml"
    path.write_text(text)
    return profile_allowing(path, ["begin"], folder)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


@dataclass
class Side:
    """One side's figures: wall time until every job reached Slurm, and each launch's time."""

    label: str
    seconds: float
    latencies: list[float]
    answered_new: int = 0

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds

    def line(self) -> str:
        ms = [value * 1000 for value in self.latencies]
        extra = f", {self.answered_new} answered `new`" if self.answered_new else ""
        return (
            f"{self.label:<22} {len(ms)} jobs in {self.seconds:.2f} s = {self.rate:6.1f} "
            f"jobs/s; latency p50 {percentile(ms, 0.5):6.1f} ms, p99 "
            f"{percentile(ms, 0.99):6.1f} ms, max {max(ms):6.1f} ms{extra}"
        )


def in_parallel(count: int, clients: int, work: Callable[[int], None]) -> float:
    """Run work(0..count-1) on `clients` threads taking the next index; the wall time."""
    indices = iter(range(count))
    lock = threading.Lock()

    def loop() -> None:
        while True:
            with lock:
                index = next(indices, None)
            if index is None:
                return
            work(index)

    threads = [threading.Thread(target=loop) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def slurm_count(name: str, states: str = "all") -> int:
    out = subprocess.run(
        ["squeue", "-h", "-t", states, "-n", name, "-o", "%i"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return len(out.split())


def raw(label: str, script: str, name: str, count: int, clients: int) -> Side:
    """`clients` parallel `sbatch --hold` processes submitting `count` jobs in total."""
    latencies: list[float] = []
    argv = ["sbatch", "--parsable", "--hold", f"--job-name={name}", "--comment=bench-raw"]

    def one(_: int) -> None:
        start = time.perf_counter()
        subprocess.run(argv, input=script, capture_output=True, text=True, check=True)
        latencies.append(time.perf_counter() - start)

    return Side(label, in_parallel(count, clients, one), latencies)


def gateway(url: str, headers: dict[str, str], name: str, count: int, clients: int) -> Side:
    """`clients` concurrent keep-alive HTTP clients launching `count` jobs through serve."""
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps(job(name))
    latencies: list[float] = []
    states: list[str] = []
    local = threading.local()

    def one(_: int) -> None:
        if not hasattr(local, "http"):
            local.http = http.client.HTTPConnection(host, int(port), timeout=120)
        start = time.perf_counter()
        local.http.request(
            "POST",
            f"{API}/compute/job/{RESOURCE}",
            body=body,
            headers={**headers, "Content-Type": "application/json"},
        )
        answer = local.http.getresponse()
        payload = answer.read()
        latencies.append(time.perf_counter() - start)
        if answer.status != 200:
            raise SystemExit(f"launch answered {answer.status}: {payload!r}")
        states.append(json.loads(payload)["status"]["state"])

    start = time.perf_counter()
    in_parallel(count, clients, one)
    # A job answered `new` (the wait ran out) reaches Slurm later: count until all are there.
    while slurm_count(name) < count:
        time.sleep(0.01)
    seconds = time.perf_counter() - start
    answered_new = sum(1 for state in states if state != "queued")
    return Side("gateway (HTTP)", seconds, latencies, answered_new)


def concurrent(args: argparse.Namespace, profile: Path, data: Path, run: str) -> None:
    """Part 1: raw, gateway, raw; jobs named RUN-raw, RUN-gw, RUN-warm."""
    names = [f"{run}-raw", f"{run}-gw", f"{run}-warm"]
    with serve(profile, data / "serve") as server:
        headers = server.headers()
        # Warm-up (connections, first imports, the store): not measured.
        gateway(server.url, headers, names[2], args.clients, args.clients)
        store = JobStore(f"sqlite:///{data}/serve/jobs.db")
        record = next(r for r in store.unsettled() if r.script)
        script = record.script.replace(names[2], names[0])
        first = raw("raw sbatch (before)", script, names[0], args.jobs, args.clients)
        print(first.line(), flush=True)
        cpu = cpu_seconds(server.pid)
        through = gateway(server.url, headers, names[1], args.jobs, args.clients)
        cpu = cpu_seconds(server.pid) - cpu
        print(through.line(), flush=True)
        print(
            f"serve's own CPU time: {cpu:.2f} s in {through.seconds:.2f} s "
            f"({cpu / args.jobs * 1000:.1f} ms per launch, sbatch children not counted)",
            flush=True,
        )
        second = raw("raw sbatch (after)", script, names[0], args.jobs, args.clients)
        print(second.line(), flush=True)
    raw_rate = (first.rate + second.rate) / 2
    raw_p99 = (percentile(first.latencies, 0.99) + percentile(second.latencies, 0.99)) / 2
    print(
        f"throughput gateway/raw: {through.rate / raw_rate:.2f} (target >= 0.9); "
        f"gateway p99 {percentile(through.latencies, 0.99) * 1000:.1f} ms (target < 100 ms);"
        f" raw p99 {raw_p99 * 1000:.1f} ms",
        flush=True,
    )


def sequential(rounds: int, profile: Path, data: Path, run: str, psij_ids: list[str]) -> None:
    """Part 2: raw sbatch, Engine.submit, PSI/J, interleaved; jobs named RUN-seq-*, except
    PSI/J's (it names a job after its own id), whose Slurm ids go to `psij_ids`."""
    from psij import Job, JobAttributes, JobExecutor, JobSpec

    names = [f"{run}-seq-raw", f"{run}-seq-engine", f"{run}-seq-psij"]
    registry = ProfileRegistry.from_files([profile])
    engine = Engine(
        registry=registry,
        store=JobStore(f"sqlite:///{data}/engine.db"),
        backends=Backends(data / "engine"),
    )
    spec = parse_jobspec(job(names[1]))
    script = engine.submit(owner="bench", resource_id=RESOURCE, spec=spec).record.script
    script = script.replace(names[1], names[0])
    executor = JobExecutor.get_instance("slurm")
    argv = ["sbatch", "--parsable", "--hold", f"--job-name={names[0]}", "--comment=bench-raw"]
    times: dict[str, list[float]] = {"raw sbatch": [], "Engine.submit": [], "PSI/J slurm": []}

    def psij_once() -> None:
        attributes = JobAttributes(
            duration=timedelta(seconds=60), custom_attributes={"slurm.begin": "now+1hour"}
        )
        submitted = Job(JobSpec(executable="/bin/true", name=names[2], attributes=attributes))
        executor.submit(submitted)
        psij_ids.append(submitted.native_id or "")

    actions: dict[str, Callable[[], object]] = {
        "raw sbatch": lambda: subprocess.run(
            argv, input=script, capture_output=True, text=True, check=True
        ),
        "Engine.submit": lambda: engine.submit(owner="bench", resource_id=RESOURCE, spec=spec),
        "PSI/J slurm": psij_once,
    }
    order = list(actions)
    try:
        for index in range(rounds + 1):
            # Rotate who goes first, so no side always follows another's sbatch.
            for label in order[index % 3 :] + order[: index % 3]:
                start = time.perf_counter()
                actions[label]()
                if index:  # round 0 warms up
                    times[label].append(time.perf_counter() - start)
    finally:
        engine.close()
    medians = {label: statistics.median(values) for label, values in times.items()}
    for label, value in medians.items():
        print(
            f"sequential {label:<14} median {value * 1000:6.1f} ms/job "
            f"(p90 {percentile(times[label], 0.9) * 1000:.1f} ms)",
            flush=True,
        )
    base = medians["raw sbatch"]
    print(
        f"sequential Engine.submit/raw: {medians['Engine.submit'] / base:.2f} (target <= "
        f"1.15); PSI/J/raw: {medians['PSI/J slurm'] / base:.2f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument(
        "--sequential",
        type=int,
        default=30,
        help="rounds of the sequential comparison (0: skip it)",
    )
    args = parser.parse_args()
    run = f"bench-launch-{uuid.uuid4().hex[:8]}"
    names: list[str] = []
    psij_ids: list[str] = []
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        data = Path(tmp)
        profile = cluster_profile(data)
        try:
            names += [f"{run}-raw", f"{run}-gw", f"{run}-warm"]
            concurrent(args, profile, data, run)
            if args.sequential:
                names += [f"{run}-seq-raw", f"{run}-seq-engine", f"{run}-seq-psij"]
                sequential(args.sequential, profile, data, run, psij_ids)
        finally:
            for name in names:
                subprocess.run(["scancel", "-n", name], capture_output=True, check=False)
            ids = [native for native in psij_ids if native]
            if ids:
                subprocess.run(["scancel", *ids], capture_output=True, check=False)
            left = sum(slurm_count(name, "PENDING,RUNNING") for name in names)
            if ids:
                left += len(
                    subprocess.run(
                        ["squeue", "-h", "-t", "PENDING,RUNNING", "-j", ",".join(ids), "-o", "%i"],
                        capture_output=True,
                        text=True,
                        check=False,
                    ).stdout.split()
                )
            print(f"cancelled the run's jobs; {left} still pending or running")


if __name__ == "__main__":
    main()
