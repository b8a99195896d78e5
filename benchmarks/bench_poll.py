"""One poll cycle over a large store: its time, its CPU and its SQL, before and after (issue 25).

A store (SQLite in a scratch folder, or a fresh database on the PostgreSQL server of
`--database-url`) is filled by bulk insert with `--jobs` jobs, of which `--active` are
unsettled (queued, with a native id) and the rest completed; every row holds a real plan,
spec, script and history, as a submission leaves them. The scheduler is a stand-in,
`InstantScheduler`: it answers the status query at once from a table, so the figures are the
gateway's own. Two cases, each timed over `--rounds` cycles (`Poller.cycle(force=True)`,
the lease check and the reconcile included) after one warm-up cycle:

- `pending`: every job still waits, as stored (no change);
- `1% change`: each cycle, 1 % of the waiting jobs start running (a state change each).

For each: the median wall time of a cycle, its CPU time (the process's, all threads) and
the SQL statements it ran. With `--compare DIR` (an export of the code before the change,
e.g. `git -C /work/main archive HEAD | tar -x -C /tmp/before`), the same cases run on that
code too, side by side: each code in a child process with its folder first on PYTHONPATH.

    .venv/bin/python benchmarks/bench_poll.py --jobs 100000 --active 10000 \\
        [--database-url postgresql+psycopg://...] [--compare /tmp/before]

Prove it runs with tiny numbers: `--jobs 2000 --active 200 --rounds 3`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHUNK = 5000
"""Rows per bulk INSERT."""


class InstantScheduler:
    """STAND-IN for a batch system's status query: answers at once from `jobs` (native id
    -> state); a job it does not list is "gone" (left out), as a real one's would be."""

    def __init__(self, jobs: dict[str, Any]) -> None:
        self.jobs = jobs
        self.queries = 0

    def statuses(self, native_ids: Collection[str]) -> dict[str, Any]:
        self.queries += 1
        return {i: self.jobs[i] for i in native_ids if i in self.jobs}


# ---- the child: one code, one store, both cases ----------------------------------------------


def fill(store: Any, jobs: int, active: int) -> list[str]:
    """Bulk-insert the jobs; returns the native ids of the unsettled ones."""
    from sqlalchemy import insert

    from iri_gateway.models.job import JobState
    from iri_gateway.planning.jobspec_io import parse_jobspec
    from iri_gateway.planning.planner import make_plan
    from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile
    from iri_gateway.service.operations.schema import JobRow

    loaded = ProfileRegistry.from_files([builtin_profile("local")]).get("local")
    spec = {
        "name": "bench",
        "executable": "/bin/sh",
        "arguments": ["-c", "sleep 600"],
        "environment": {f"VAR_{i}": f"value {i}" for i in range(10)},
        "resources": {"node_count": 1, "process_count": 1},
        "attributes": {"duration": 3600},
    }
    plan = make_plan(parse_jobspec(spec), loaded).model_dump(mode="json")
    script = plan.pop("script")
    now = time.time()
    waiting: list[str] = []
    rows: list[dict[str, Any]] = []

    def flush() -> None:
        with store.engine.begin() as connection:
            connection.execute(insert(JobRow), rows)
        rows.clear()

    for number in range(jobs):
        unsettled = number < active
        native_id = str(1_000_000 + number)
        state = JobState.QUEUED if unsettled else JobState.COMPLETED
        message = "PENDING" if unsettled else "COMPLETED, exit code 0"
        history = [
            {"state": "new", "time": now - 60, "message": "accepted by the gateway"},
            {"state": "queued", "time": now - 59, "message": "PENDING"},
        ]
        if not unsettled:
            history.append({"state": "completed", "time": now - 1, "message": message})
        else:
            waiting.append(native_id)
        rows.append(
            {
                "id": str(uuid.uuid4()),
                "owner": f"user{number % 7}",
                "resource_id": "local",
                "idempotency_key": None,
                "request_hash": None,
                "spec": spec,
                "effective_spec": {**spec, "directory": f"/scratch/jobs/{number}"},
                "plan": plan,
                "script": script,
                "native_id": native_id,
                "state": state.value,
                "desired": "submitted",
                "exit_code": None if unsettled else 0,
                "message": message,
                "history": history,
                "members": [],
                "submit_attempted_at": now - 60,
                "created_at": now - 3600,
                "updated_at": now - 59,
                "claimed_by": None,
                "cancel_sent": False,
            }
        )
        if len(rows) >= CHUNK:
            flush()
    if rows:
        flush()
    return waiting


@contextmanager
def counted(engine: Any) -> Iterator[list[str]]:
    """The SQL statements run on `engine` meanwhile."""
    from sqlalchemy import event

    statements: list[str] = []

    def before(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield statements
    finally:
        event.remove(engine, "before_cursor_execute", before)


def child(url: str, jobs: int, active: int, rounds: int) -> dict[str, Any]:
    """Both cases on the code this process imports; figures as JSON-ready values."""
    import iri_gateway
    from iri_gateway.models.job import JobState, NativeStatus
    from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile
    from iri_gateway.service.jobs.engine import Engine
    from iri_gateway.service.jobs.poller import Poller
    from iri_gateway.service.operations.backends import Backends
    from iri_gateway.service.operations.store import JobStore

    results: dict[str, Any] = {"code": str(Path(iri_gateway.__file__).parent)}
    with tempfile.TemporaryDirectory(prefix="iri-bench-poll-") as folder:
        store = JobStore(url or f"sqlite:///{folder}/jobs.db")
        start = time.perf_counter()
        waiting = fill(store, jobs, active)
        results["fill_seconds"] = time.perf_counter() - start
        registry = ProfileRegistry.from_files([builtin_profile("local")])
        engine = Engine(registry=registry, store=store, backends=Backends(Path(folder)))
        pending = {i: NativeStatus(i, JobState.QUEUED, "PENDING") for i in waiting}
        scheduler = InstantScheduler(dict(pending))
        loaded = registry.get("local")
        engine.backends.get(loaded, "user0").batch = scheduler  # type: ignore[assignment]
        poller = Poller(engine)
        poller.cycle(force=True)  # warm-up: connections, caches, the leases
        step = max(1, len(waiting) // 100)
        for case in ("pending", "1% change"):
            walls: list[float] = []
            cpus: list[float] = []
            queries: list[int] = []
            changed: list[int] = []
            for round_ in range(rounds):
                if case == "1% change":
                    start_at = (round_ * step) % max(1, len(waiting))
                    for native_id in waiting[start_at : start_at + step]:
                        scheduler.jobs[native_id] = NativeStatus(
                            native_id, JobState.ACTIVE, "RUNNING"
                        )
                with counted(store.engine) as statements:
                    cpu, wall = time.process_time(), time.perf_counter()
                    changes = poller.cycle(force=True)
                    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                walls.append(wall)
                cpus.append(cpu)
                queries.append(len(statements))
                changed.append(sum(changes.values()))
            results[case] = {
                "wall_ms": statistics.median(walls) * 1000,
                "cpu_ms": statistics.median(cpus) * 1000,
                "sql": statistics.median(queries),
                "changes": statistics.median(changed),
                "status_queries": scheduler.queries,
            }
        engine.close()
    return results


# ---- the parent: a child per code, a fresh database each, one table -----------------------


@contextmanager
def database(server: str | None) -> Iterator[str]:
    """A fresh database on the PostgreSQL server (dropped afterwards), or '' for SQLite."""
    if not server:
        yield ""
        return
    from _common import fresh_database

    with fresh_database(server) as (url, _, _):
        yield url


def run_child(code: Path, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    with database(args.database_url) as url:
        command = [
            sys.executable,
            __file__,
            "--child",
            "--jobs",
            str(args.jobs),
            "--active",
            str(args.active),
            "--rounds",
            str(args.rounds),
            "--url",
            url,
        ]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"the cycle on {code} failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(result["code"]).resolve() != (code / "iri_gateway").resolve():
        sys.exit(f"the child meant to run {code} imported {result['code']}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs in the store")
    parser.add_argument("--active", type=int, default=10_000, help="of which unsettled")
    parser.add_argument("--rounds", type=int, default=5, help="cycles timed per case")
    parser.add_argument("--database-url", help="a PostgreSQL server (default: SQLite)")
    parser.add_argument("--compare", type=Path, help="an export of the code before")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.active > args.jobs or args.active < 0 or args.rounds < 1:
        parser.error("--active must be between 0 and --jobs, and --rounds at least 1")
    if args.child:
        print(json.dumps(child(args.url, args.jobs, args.active, args.rounds)))
        return
    if args.compare is not None and not (args.compare / "iri_gateway").is_dir():
        sys.exit(f"--compare {args.compare}: no iri_gateway package there")
    codes = {"after": ROOT}
    if args.compare is not None:
        codes["before"] = args.compare
    results = {label: run_child(code, args) for label, code in codes.items()}
    where = "PostgreSQL" if args.database_url else "SQLite"
    print(f"poll cycle, {args.jobs} jobs of which {args.active} unsettled, {where}, ", end="")
    print(f"median of {args.rounds} cycles")
    print(f"{'case':<11} {'code':<7} {'wall ms':>9} {'CPU ms':>9} {'SQL':>5} {'changes':>8}")
    for case in ("pending", "1% change"):
        for label, result in results.items():
            row = result[case]
            print(
                f"{case:<11} {label:<7} {row['wall_ms']:>9.1f} {row['cpu_ms']:>9.1f} "
                f"{row['sql']:>5.0f} {row['changes']:>8.0f}"
            )
    for label, result in results.items():
        print(f"{label}: {result['code']} (store filled in {result['fill_seconds']:.1f} s)")


if __name__ == "__main__":
    main()
