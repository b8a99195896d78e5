"""One `serve` replica against two on one PostgreSQL: getJob and launchJob, and where the CPU goes.

Why: issue 13 makes several replicas on one database the facility design; this measures how
getJob and launchJob throughput change from one replica to two on the same machine, and which
process spends the CPU time (serve, its `sbatch` children, PostgreSQL, slurmctld, the load
generator), so the figures say where the bottleneck is rather than only that there is one.

Needs the test cluster (`scripts/cluster start`; never started or stopped here), the test
PostgreSQL (`scripts/postgres start` is run, it is idempotent; `--postgres URL` names another
server whose role may create databases) and `wrk` (`apt-get install wrk`). One run:

1. A fresh database on the PostgreSQL server (dropped at the end), one data directory shared
   by the replicas (one tokens file: the same token works on both), the test cluster's profile
   with `begin` allowed (as bench_launch.py). Replica A starts; SEED jobs are launched through
   it (warm-up, and the existing jobs getJob reads).
2. Three configurations in turn: ONE (replica A alone), TWO (replica B started on the same
   database, both serve), ONE again (B stopped), so a Slurm queue that grows during the run
   weighs on both sides (the one-replica figures are the mean of the two). In each:
   - getJob: `wrk` with CLIENTS connections on 2 threads for SECONDS, each request the next
     of the seeded jobs (GET /compute/status/cluster/{id}); in TWO each wrk thread (half of
     the connections) talks to one replica.
   - launchJob: CLIENTS keep-alive HTTP clients (stdlib `http.client`, one thread each; in
     TWO they alternate between the replicas) launch JOBS jobs; jobs/s reaching the
     scheduler (JOBS / time until every job has a Slurm id), p50/p99 of the HTTP request.
     Every accepted job must be in Slurm exactly once (counted by its name); a shortfall or
     a duplicate is printed as a fault.
3. For every phase the CPU time (user + system, from /proc) of each serve process, of the
   commands it ran (`sbatch`, `squeue`: its reaped children), of PostgreSQL (the live
   backends of the run's database; every backend that exited, the run's pool overflow
   connections among them; the server's own processes; other databases' live backends apart),
   of slurmctld, of the load generator, of the whole machine, and the busiest processes
   outside the run (to see another load), per request; and from `pg_stat_database` the
   sessions opened and transactions run on the run's database. Before the phases, the CPU
   cost of one new PostgreSQL session (40 opened and closed).

Jobs stay pending (`begin: now+1hour`) and are all cancelled at the end by name.

    SLURM_CONF=/tmp/iri-cluster/slurm.conf .venv/bin/python benchmarks/bench_replicas.py \\
        --jobs 200 --clients 16 --seconds 10
    ... --quick     # a small run: 32 jobs, 2 s of getJob (checks the script, not the speed)
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from _common import (
    Postgres,
    all_processes,
    fresh_database,
    machine_busy,
    postgres_url,
    proc_times,
    wait_ready,
)
from bench_launch import RESOURCE, cluster_profile, in_parallel, job, percentile, slurm_count
from sqlalchemy import create_engine, text

from tests.integration.gateway_process import API, Gateway, serve

WRK_SCRIPT = """
-- Thread n talks to target n (mod the number of targets); each request the next job id.
local targets = {}
for t in string.gmatch(os.getenv("BENCH_TARGETS"), "[^,]+") do targets[#targets + 1] = t end
local made = 0
function setup(thread)
  local host, port = targets[(made % #targets) + 1]:match("([^:]+):(%d+)")
  thread.addr = wrk.lookup(host, port)[1]
  made = made + 1
end
function init(args)
  ids = {}
  for line in io.lines(os.getenv("BENCH_IDS")) do ids[#ids + 1] = line end
  at = math.random(#ids)
  headers = {["Authorization"] = "Bearer " .. os.getenv("BENCH_TOKEN"),
             ["X-IRI-Facility-Project"] = "proj1"}
  prefix = os.getenv("BENCH_PREFIX")
end
function request()
  at = (at % #ids) + 1
  return wrk.format("GET", prefix .. ids[at], headers)
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %d %d %d %d %d %d %d %d\\n", summary.requests,
    summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(99), latency.max, latency.mean))
end
"""


@dataclass
class Snapshot:
    """CPU seconds by what spends them, per process, at one moment."""

    at: float
    busy: tuple[float, float]
    by_pid: dict[str, dict[int, float]]
    sessions: int
    transactions: int
    sessions_elsewhere: int
    others: dict[int, tuple[str, float]]
    """Every other process: its command name and CPU seconds."""


class Meter:
    """Snapshots of the processes that matter; the difference of two, by category."""

    def __init__(self, postgres: Postgres) -> None:
        self.postgres = postgres
        self.replicas: dict[str, int] = {}

    def snapshot(self) -> Snapshot:
        by_pid: dict[str, dict[int, float]] = {}

        def add(category: str, pid: int, seconds: float) -> None:
            by_pid.setdefault(category, {})[pid] = seconds

        for label, pid in self.replicas.items():
            times = proc_times(pid)
            if times is not None:
                add(f"serve {label}", pid, times[0])
                add("serve's commands", pid, times[1])  # sbatch, squeue, reaped
        ours, elsewhere, server = self.postgres.processes()
        for category, pids in (
            ("PostgreSQL, run's backends", ours),
            ("PostgreSQL, other databases", elsewhere),
            ("PostgreSQL, server", server),
        ):
            for pid in pids:
                times = proc_times(pid)
                if times is not None:
                    add(category, pid, times[0])
        times = proc_times(self.postgres.postmaster)
        if times is not None:
            add("PostgreSQL, server", self.postgres.postmaster, times[0])
            # Every backend and autovacuum worker that exited, of any database.
            add("PostgreSQL, exited", self.postgres.postmaster, times[1])
        for pid in slurmctld_pids():  # looked up each time: a test may restart it
            times = proc_times(pid)
            if times is not None:
                add("slurmctld", pid, times[0])
        seen = {pid for pids in by_pid.values() for pid in pids} | {os.getpid()}
        others = {pid: value for pid, value in all_processes().items() if pid not in seen}
        return Snapshot(
            time.perf_counter(), machine_busy(), by_pid, *self.postgres.counters(), others
        )

    @staticmethod
    def spent(before: Snapshot, after: Snapshot) -> dict[str, float]:
        """CPU seconds spent between two snapshots, by category (a process that appeared
        counts from zero; one that ended counts nothing, except backends, whose time reaches
        the postmaster's children)."""
        spent: dict[str, float] = {}
        for category, pids in after.by_pid.items():
            earlier = before.by_pid.get(category, {})
            spent[category] = sum(seconds - earlier.get(pid, 0.0) for pid, seconds in pids.items())
        spent["machine (all processes)"] = after.busy[0] - before.busy[0]
        spent["stolen by the hypervisor"] = after.busy[1] - before.busy[1]
        return spent

    @staticmethod
    def busiest(before: Snapshot, after: Snapshot, count: int = 4) -> list[tuple[float, str]]:
        """The other processes that spent the most CPU seconds between two snapshots (one
        that started meanwhile counts from zero), with their command names."""
        spent = [
            (seconds - before.others.get(pid, ("", 0.0))[1], f"{command} ({pid})")
            for pid, (command, seconds) in after.others.items()
        ]
        return sorted(spent, reverse=True)[:count]

    @staticmethod
    def database(before: Snapshot, after: Snapshot) -> tuple[int, int, int]:
        """(sessions opened, transactions) on the run's database between two snapshots, and
        the sessions opened on other databases (other users of the server)."""
        return (
            after.sessions - before.sessions,
            after.transactions - before.transactions,
            max(0, after.sessions_elsewhere - before.sessions_elsewhere),
        )


# --- the phases -----------------------------------------------------------------------------


@dataclass
class Phase:
    """One measured phase: what, how many, how long, latencies, faults and CPU."""

    config: str
    kind: str
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    faults: list[str] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)
    sessions: int = 0
    transactions: int = 0
    sessions_elsewhere: int = 0
    busiest_others: list[tuple[float, str]] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.requests / self.seconds


def get_jobs(
    config: str, replicas: list[Gateway], ids_file: Path, clients: int, seconds: float, meter: Meter
) -> Phase:
    """`wrk` driving getJob over the seeded jobs; connections split over the replicas."""
    script = ids_file.parent / "getjob.lua"
    script.write_text(WRK_SCRIPT)
    first = replicas[0]
    env = {
        **os.environ,
        "BENCH_TARGETS": ",".join(r.url.removeprefix("http://") for r in replicas),
        "BENCH_IDS": str(ids_file),
        "BENCH_TOKEN": first.token,
        "BENCH_PREFIX": f"{API}/compute/status/{RESOURCE}/",
    }
    argv = ["wrk", "-t2", f"-c{clients}", f"-d{seconds:g}s", "-s", str(script), first.url]
    before = meter.snapshot()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    finished = subprocess.run(
        argv, capture_output=True, text=True, env=env, check=False, timeout=seconds + 60
    )
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    after = meter.snapshot()
    result = next(
        (line for line in finished.stdout.splitlines() if line.startswith("RESULT ")), None
    )
    if finished.returncode != 0 or result is None:
        raise SystemExit(
            f"wrk failed ({finished.returncode}):\n{finished.stdout}\n{finished.stderr}"
        )
    count, micros, socket_errors, status_errors, p50, p99, _, _ = (
        int(float(value)) for value in result.split()[1:]
    )
    faults = []
    if socket_errors or status_errors:
        faults.append(f"getJob: {socket_errors} socket errors, {status_errors} answers not 2xx/3xx")
    cpu = Meter.spent(before, after)
    cpu["load generator (wrk)"] = (
        usage.ru_utime + usage.ru_stime - children.ru_utime - children.ru_stime
    )
    return Phase(
        config,
        "getJob",
        count,
        micros / 1e6,
        p50 / 1000,
        p99 / 1000,
        faults,
        cpu,
        *Meter.database(before, after),
        Meter.busiest(before, after),
    )


def launch(
    config: str, replicas: list[Gateway], name: str, count: int, clients: int, meter: Meter
) -> tuple[Phase, list[str]]:
    """`clients` keep-alive HTTP clients (alternating over the replicas) launching `count`
    jobs named `name`; the time until every accepted job has a Slurm id. Also the job ids."""
    body = json.dumps(job(name))
    headers = {**replicas[0].headers(), "Content-Type": "application/json"}
    latencies: list[float] = []
    ids: list[str] = []
    faults: list[str] = []
    local = threading.local()
    ordinal = iter(range(clients))
    lock = threading.Lock()

    def connect() -> http.client.HTTPConnection:
        host, port = local.url.removeprefix("http://").split(":")
        return http.client.HTTPConnection(host, int(port), timeout=120)

    def one(_: int) -> None:
        if not hasattr(local, "http"):
            with lock:
                local.url = replicas[next(ordinal) % len(replicas)].url
            local.http = connect()
        start = time.perf_counter()
        try:
            local.http.request("POST", f"{API}/compute/job/{RESOURCE}", body=body, headers=headers)
            answer = local.http.getresponse()
            payload = answer.read()
        except (OSError, http.client.HTTPException) as error:
            local.http.close()
            local.http = connect()
            with lock:
                faults.append(f"launch: {type(error).__name__}: {error}")
            return
        latencies.append(time.perf_counter() - start)
        if answer.status != 200:
            with lock:
                faults.append(f"launch answered {answer.status}: {payload[:300]!r}")
            return
        ids.append(json.loads(payload)["id"])

    before = meter.snapshot()
    generator = time.process_time()
    start = time.perf_counter()
    in_parallel(count, clients, one)
    # A job answered `new` (the wait ran out) reaches Slurm later: count until all are there.
    deadline = time.monotonic() + 120
    seen = slurm_count(name)
    while seen < len(ids) and time.monotonic() < deadline:
        time.sleep(0.01)
        seen = slurm_count(name)
    seconds = time.perf_counter() - start
    generator = time.process_time() - generator
    after = meter.snapshot()
    if seen < len(ids):
        faults.append(
            f"launch: {len(ids) - seen} of {len(ids)} accepted jobs not in Slurm after 120 s"
        )
    time.sleep(1)  # a duplicate submission would show a moment later
    seen = slurm_count(name)
    if seen > len(ids):
        faults.append(f"launch: {seen} Slurm jobs for {len(ids)} accepted: submitted twice")
    cpu = Meter.spent(before, after)
    cpu["load generator (the script)"] = generator
    if not latencies:
        raise SystemExit(f"no launch answered: {faults[:3]}")
    ms = [value * 1000 for value in latencies]
    return (
        Phase(
            config,
            "launchJob",
            len(ids),
            seconds,
            percentile(ms, 0.5),
            percentile(ms, 0.99),
            faults,
            cpu,
            *Meter.database(before, after),
            Meter.busiest(before, after),
        ),
        ids,
    )


# --- set-up ---------------------------------------------------------------------------------


def slurmctld_pids() -> list[int]:
    found = subprocess.run(
        ["pgrep", "-x", "slurmctld"], capture_output=True, text=True, check=False
    ).stdout.split()
    return [int(pid) for pid in found]


def store_check(url: str) -> list[str]:
    """Faults in the run's database: a job without a Slurm id, a Slurm id twice."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text("SELECT native_id, state, count(*) FROM jobs GROUP BY native_id, state")
            ).all()
    finally:
        engine.dispose()
    faults = []
    missing = sum(n for native, _, n in rows if native is None)
    if missing:
        faults.append(f"store: {missing} jobs have no Slurm id")
    twice = [native for native, _, n in rows if native is not None and n > 1]
    if twice:
        faults.append(f"store: Slurm ids held by several jobs: {twice[:5]}")
    others = {state: n for _, state, n in rows if state != "queued"}
    if others:
        faults.append(f"store: jobs not `queued` (all are held in Slurm): {others}")
    return faults


# --- report ---------------------------------------------------------------------------------

COLUMNS = {
    "serve A": "A",
    "serve B": "B",
    "serve's commands": "cmds",
    "PostgreSQL, run's backends": "PG run",
    "PostgreSQL, exited": "PG exited",
    "PostgreSQL, server": "PG server",
    "slurmctld": "slurmctld",
    "load generator": "load gen",
    "machine (all processes)": "machine",
    "PostgreSQL, other databases": "PG other",
    "stolen by the hypervisor": "stolen",
}
"""The CPU table's columns: A and B are the serve processes, cmds the commands they ran
(sbatch, squeue), PG run the live backends of the run's database, PG exited every backend
that exited (the postmaster's reaped children: the run's pool overflow connections, and any
other database's), PG server the postmaster and PostgreSQL's own workers, machine the whole
machine, PG other the live backends of other databases (other users of the server), stolen
the time the hypervisor ran other guests on this machine's virtual cores."""


def report(phases: list[Phase], clients: int) -> None:
    print()
    print(
        f"{'config':<10} {'call':<9} {'n':>6} {'s':>6} {'per s':>7} {'p50 ms':>7} "
        f"{'p99 ms':>7} {'PG sessions':>11} {'PG xacts/req':>12} {'sessions elsewhere':>18}"
    )
    for phase in phases:
        print(
            f"{phase.config:<10} {phase.kind:<9} {phase.requests:>6} {phase.seconds:>6.2f} "
            f"{phase.rate:>7.1f} {phase.p50_ms:>7.1f} {phase.p99_ms:>7.1f} "
            f"{phase.sessions:>11} {phase.transactions / phase.requests:>12.1f} "
            f"{phase.sessions_elsewhere:>18}"
        )
    print()
    print(f"CPU ms per request{'':<2} " + " ".join(f"{short:>9}" for short in COLUMNS.values()))
    for phase in phases:
        per = {key: value / phase.requests * 1000 for key, value in phase.cpu.items()}
        per["load generator"] = next(v for k, v in per.items() if k.startswith("load gen"))
        print(
            f"{phase.config:<10} {phase.kind:<9} "
            + " ".join(f"{per.get(column, 0.0):9.2f}" for column in COLUMNS)
        )
    print()
    print("CPU in % of one core during each phase (the machine has 2 cores: 200 %)")
    for phase in phases:
        share = {key: value / phase.seconds * 100 for key, value in phase.cpu.items()}
        share["load generator"] = next(v for k, v in share.items() if k.startswith("load gen"))
        print(
            f"{phase.config:<10} {phase.kind:<9} "
            + " ".join(f"{share.get(column, 0.0):8.0f}%" for column in COLUMNS)
        )
    print()
    print("busiest processes outside the run during each phase (% of one core)")
    for phase in phases:
        print(
            f"{phase.config:<10} {phase.kind:<9} "
            + ", ".join(
                f"{command} {value / phase.seconds * 100:.0f}%"
                for value, command in phase.busiest_others
            )
        )
    print()
    for kind in ("getJob", "launchJob"):
        one = [p.rate for p in phases if p.kind == kind and p.config.startswith("one")]
        two = [p.rate for p in phases if p.kind == kind and p.config == "two"]
        if one and two:
            base = statistics.mean(one)
            print(
                f"{kind}: two replicas / one = {two[0]:.1f} / {base:.1f} per s "
                f"(one: {' and '.join(f'{r:.1f}' for r in one)}) = {two[0] / base:.2f} "
                f"({clients} clients)"
            )
    faults = [fault for phase in phases for fault in phase.faults]
    print("faults: " + ("; ".join(faults) if faults else "none"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200, help="launches per configuration")
    parser.add_argument("--seed", type=int, default=200, help="jobs getJob reads")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0, help="getJob time per config")
    parser.add_argument("--postgres", help="server URL (default: scripts/postgres's)")
    parser.add_argument("--quick", action="store_true", help="a small run: 32 jobs, 2 s")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.seed, args.seconds = 32, 32, 2.0
    run = f"bench-replicas-{uuid.uuid4().hex[:8]}"
    names: list[str] = []
    phases: list[Phase] = []
    with (
        tempfile.TemporaryDirectory(dir="/tmp") as tmp,
        fresh_database(postgres_url(args.postgres)) as (url, admin, database),
    ):
        folder = Path(tmp)
        profile = cluster_profile(folder)
        env = {"IRI_GATEWAY_DATABASE_URL": url}
        meter = Meter(Postgres(admin, database))
        cost = meter.postgres.session_cost(url)
        print(
            f"one new PostgreSQL session costs the server {cost * 1000:.1f} ms of CPU "
            "(40 sessions opened and closed, the postmaster's reaped children)",
            flush=True,
        )
        if not slurmctld_pids():
            print("slurmctld not found: its CPU time is not measured")

        def measure(config: str, group: list[Gateway]) -> None:
            phases.append(get_jobs(config, group, ids_file, args.clients, args.seconds, meter))
            names.append(f"{run}-{config.replace(' ', '-')}")
            phases.append(launch(config, group, names[-1], args.jobs, args.clients, meter)[0])
            print(
                f"{config}: getJob {phases[-2].rate:.0f}/s, launchJob {phases[-1].rate:.1f} jobs/s",
                flush=True,
            )

        ids_file = folder / "ids.txt"
        try:
            with serve(profile, folder / "data", env=env) as a:
                wait_ready(a.url)
                meter.replicas["A"] = a.pid
                names.append(f"{run}-seed")  # warm-up, and the jobs getJob reads
                _, seeded = launch("seed", [a], names[-1], args.seed, args.clients, meter)
                ids_file.write_text("\n".join(seeded) + "\n")
                measure("one", [a])
                with serve(profile, folder / "data", env=env) as b:
                    wait_ready(b.url)
                    meter.replicas["B"] = b.pid
                    names.append(f"{run}-warm-b")  # B's warm-up, not measured
                    launch("warm-up", [b], names[-1], args.clients, args.clients, meter)
                    measure("two", [a, b])
                del meter.replicas["B"]
                measure("one again", [a])
            phases[-1].faults += store_check(url)
        finally:
            for name in names:
                subprocess.run(["scancel", "-n", name], capture_output=True, check=False)
            left = sum(slurm_count(name, "PENDING,RUNNING") for name in names)
            print(f"cancelled the run's jobs; {left} still pending or running")
    report(phases, args.clients)


if __name__ == "__main__":
    main()
