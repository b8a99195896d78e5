"""What several benchmarks share: CPU time and memory of processes from /proc, the test
PostgreSQL (a fresh database per run), a serve process with tokens for several users,
launching held jobs on the test cluster, and a wrk run with its Lua script.

Why one module: bench_replicas.py, bench_iri.py, bench_scale.py and bench_soak.py measure
the same processes the same way; one copy of how keeps their figures comparable.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx
from bench_launch import RESOURCE, ROOT, cluster_profile, in_parallel, job, slurm_count
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.pool import NullPool

from iri_gateway.service.operations.database import normalise_url
from tests.integration.gateway_process import API

CLOCK = os.sysconf("SC_CLK_TCK")

# --- CPU time and memory, from /proc --------------------------------------------------------


def proc_times(pid: int) -> tuple[float, float] | None:
    """(own, reaped children's) user + system CPU seconds of a process; None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    own = (int(fields[11]) + int(fields[12])) / CLOCK
    children = (int(fields[13]) + int(fields[14])) / CLOCK
    return own, children


def parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def all_processes() -> dict[int, tuple[str, float]]:
    """Every process's command name and own CPU seconds (to name what else ran meanwhile)."""
    found: dict[int, tuple[str, float]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                text_ = (entry / "stat").read_text()
            except OSError:
                continue
            head, tail = text_.rsplit(")", 1)
            fields = tail.split()
            found[int(entry.name)] = (
                head.split("(", 1)[1],
                (int(fields[11]) + int(fields[12])) / CLOCK,
            )
    return found


def machine_busy() -> tuple[float, float]:
    """Core-seconds the whole machine has been busy (not idle, not waiting for I/O, not
    stolen), and core-seconds the hypervisor gave to others (steal: a virtual machine whose
    host is busy runs slower without being busier)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values[:7]) - values[3] - values[4]) / CLOCK, values[7] / CLOCK


class Postgres:
    """The PostgreSQL server's processes, told apart: the run's database backends, the rest."""

    def __init__(self, admin: Engine, database: str) -> None:
        self.admin = admin
        self.database = database
        with admin.connect() as connection:
            own = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
        if proc_times(own) is None:
            raise SystemExit(
                "the PostgreSQL server is not on this machine: its CPU time "
                "cannot be read from /proc"
            )
        self.postmaster = parent_pid(own)

    def processes(self) -> tuple[list[int], list[int], list[int]]:
        """(backends of the run's database, backends of other databases, the server's own
        processes: background workers, the admin connection)."""
        with self.admin.connect() as connection:
            rows = connection.execute(text("SELECT pid, datname FROM pg_stat_activity")).all()
            admin = connection.execute(text("SELECT current_database()")).scalar_one()
        ours = [pid for pid, name in rows if name == self.database]
        elsewhere = [pid for pid, name in rows if name not in (self.database, None, admin)]
        server = [pid for pid, name in rows if name in (None, admin)]
        return ours, elsewhere, server

    def counters(self) -> tuple[int, int, int]:
        """(sessions opened, transactions ended) on the run's database so far, and the
        sessions opened on the other databases, as the server's statistics have them (a
        backend reports its counts within about a second)."""
        with self.admin.connect() as connection:
            row = connection.execute(
                text(
                    "SELECT sum(sessions) FILTER (WHERE datname = :name), "
                    "sum(xact_commit + xact_rollback) FILTER (WHERE datname = :name), "
                    "sum(sessions) FILTER (WHERE datname <> :name) FROM pg_stat_database"
                ),
                {"name": self.database},
            ).one()
        return int(row[0]), int(row[1]), int(row[2] or 0)

    def session_cost(self, url: str, count: int = 40) -> float:
        """Server CPU seconds one new session costs (fork, SCRAM authentication, one query,
        exit), read on the postmaster's reaped children: what a connection pool that opens
        and closes connections under load pays each time."""
        engine = create_engine(url, poolclass=NullPool)
        try:
            before = sum(proc_times(self.postmaster) or (0.0, 0.0))
            for _ in range(count):
                with engine.connect() as connection:
                    connection.execute(text("SELECT 1"))
            time.sleep(0.5)  # the postmaster reaps the last backends
            after = sum(proc_times(self.postmaster) or (0.0, 0.0))
        finally:
            engine.dispose()
        return (after - before) / count


# --- set-up ---------------------------------------------------------------------------------


def postgres_url(given: str | None) -> str:
    if given:
        return normalise_url(given)
    script = ROOT / "scripts" / "postgres"
    subprocess.run([str(script), "start"], check=True, capture_output=True, timeout=600)
    line = subprocess.run(
        [str(script), "env"], check=True, capture_output=True, text=True, timeout=60
    ).stdout.strip()
    return normalise_url(line.split("=", 1)[1])


@contextmanager
def fresh_database(server: str) -> Iterator[tuple[str, Engine, str]]:
    """A new database on `server` (its URL, an admin engine on the server's own database, its
    name); dropped afterwards, whatever happened."""
    name = f"iri_bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False), admin, name
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def wait_ready(url: str) -> None:
    """Until the server at `url` answers `/ready` (its start-up work done), at most 60 s."""
    deadline = time.monotonic() + 60
    while True:
        answer = httpx.get(f"{url}/ready", timeout=10)
        if answer.status_code == 200:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"replica {url} not ready after 60 s: {answer.text}")
        time.sleep(0.2)


def process_tree(pid: int) -> list[int]:
    """`pid` and every live descendant (uvicorn's worker processes, their commands)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                children.setdefault(parent_pid(int(entry.name)), []).append(int(entry.name))
            except (OSError, IndexError):
                continue
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found


def tree_times(pid: int) -> dict[int, tuple[float, float]]:
    """(own, reaped children's) CPU seconds of `pid` and each live descendant, by process."""
    found = {member: proc_times(member) for member in process_tree(pid)}
    return {member: times for member, times in found.items() if times is not None}


def tree_spent(
    before: dict[int, tuple[float, float]], after: dict[int, tuple[float, float]]
) -> float:
    """CPU seconds a process tree spent between two `tree_times`: every process's own time
    and what its reaped children spent (a process that appeared counts from zero; one that
    ended meanwhile is in its parent's reaped children once the parent has waited for it)."""
    return sum(
        own + reaped - sum(before.get(pid, (0.0, 0.0))) for pid, (own, reaped) in after.items()
    )


def command_name(pid: int) -> str | None:
    """The command name of a process (`comm`); None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split("(", 1)[1].rsplit(")", 1)[0]
    except OSError:
        return None


def server_processes(pid: int) -> list[int]:
    """`pid` and its live descendants that run the same program (uvicorn's workers), not the
    commands it runs (a child between fork and exec would count serve's memory twice)."""
    name = command_name(pid)
    return [member for member in process_tree(pid) if command_name(member) == name]


def rss_bytes(pids: list[int]) -> int:
    """Resident memory of these processes together, in bytes (one that ended counts 0)."""
    total = 0
    for member in pids:
        try:
            status = Path(f"/proc/{member}/status").read_text()
        except OSError:
            continue
        line = next((ln for ln in status.splitlines() if ln.startswith("VmRSS:")), None)
        total += int(line.split()[1]) * 1024 if line else 0
    return total


def postgres_cpu(postgres: Postgres) -> float:
    """CPU seconds PostgreSQL has spent so far: the run's live backends, the server's own
    processes and every backend that exited (the postmaster's reaped children)."""
    ours, _, server = postgres.processes()
    total = sum((proc_times(postgres.postmaster) or (0.0, 0.0))[1:])
    for pid in [*ours, *server, postgres.postmaster]:
        total += (proc_times(pid) or (0.0, 0.0))[0]
    return total


# --- jobs on the test cluster ---------------------------------------------------------------


def launch_held(
    url: str, token: str, name: str, count: int, clients: int = 8
) -> list[dict[str, str]]:
    """`count` jobs named `name` that stay pending an hour, launched through the server at
    `url` with `token` (project proj1) by `clients` keep-alive clients: each job's `id` and
    job folder (`directory`). Any answer but 200 stops the benchmark with it."""
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps(job(name))
    headers = {
        "Authorization": f"Bearer {token}",
        "X-IRI-Facility-Project": "proj1",
        "Content-Type": "application/json",
    }
    launched: list[dict[str, str]] = []
    failures: list[str] = []
    local = threading.local()

    def one(_: int) -> None:
        if not hasattr(local, "http"):
            local.http = http.client.HTTPConnection(host, int(port), timeout=120)
        local.http.request("POST", f"{API}/compute/job/{RESOURCE}", body=body, headers=headers)
        answer = local.http.getresponse()
        payload = answer.read()
        if answer.status != 200:
            failures.append(f"launch answered {answer.status}: {payload[:300]!r}")
            return
        document = json.loads(payload)
        folder = document["status"]["meta_data"]["directory"]
        launched.append({"id": document["id"], "directory": folder})

    def guarded(index: int) -> None:
        try:
            one(index)
        except Exception as error:  # a thread's exception would be lost: report them all
            failures.append(f"{type(error).__name__}: {error}")

    in_parallel(count, clients, guarded)
    if failures or len(launched) != count:
        raise SystemExit(f"{len(failures)} of {count} launches failed: {failures[:3]}")
    return launched


def cancel_jobs(names: list[str]) -> None:
    """Cancel every Slurm job of these names; say how many are left."""
    for name in names:
        subprocess.run(["scancel", "-n", name], capture_output=True, check=False)
    left = sum(slurm_count(name, "PENDING,RUNNING") for name in names)
    print(f"cancelled the run's jobs; {left} still pending or running", flush=True)


@contextmanager
def cluster_run(prefix: str) -> Iterator[tuple[Path, Path, str, list[str]]]:
    """A run on the test cluster: a temporary folder, the cluster's profile with `begin`
    allowed, the run's name (a prefix of its jobs' names) and the list of job names the
    benchmark adds to; every job of those names is cancelled at the end, whatever happened."""
    names: list[str] = []
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        folder = Path(tmp)
        try:
            yield folder, cluster_profile(folder), f"{prefix}-{uuid.uuid4().hex[:8]}", names
        finally:
            if names:
                cancel_jobs(names)


Option = tuple[str, type, object, str]
"""A command-line option of a benchmark: flag, type, default, meaning."""

POSTGRES_OPTION: Option = (
    "--postgres",
    str,
    None,
    "PostgreSQL server URL, its role may create databases (default: scripts/postgres's)",
)


def options_parser(doc: str, options: list[Option], quick: str) -> argparse.ArgumentParser:
    """The benchmark's command line: its options, and `--quick` (a small run that checks the
    script, not the speed) whose meaning is `quick`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    for flag, kind, default, meaning in options:
        parser.add_argument(flag, type=kind, default=default, help=meaning)
    parser.add_argument("--quick", action="store_true", help=quick)
    return parser


def parse_options(
    doc: str, options: list[Option], quick: Mapping[str, object]
) -> argparse.Namespace:
    """The benchmark's options as given; with `--quick`, the `quick` values instead."""
    meaning = ", ".join(f"--{name} {value}" for name, value in quick.items())
    args = options_parser(doc, options, f"a small run: {meaning}").parse_args()
    if args.quick:
        vars(args).update(quick)
    return args
