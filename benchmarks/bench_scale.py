"""A store of 100,000 jobs, 10,000 of them unsettled: start-up, memory and the reads.

Why: issue 25 asks that the gateway stay fast and bounded when the store is large: getJobs
pages, start-up and memory measured on 100,000 jobs of which 10,000 are active. (The poll
cycle on such a store is benchmarks/bench_poll.py's.)

One run per store (`--stores sqlite,pg`; pg is a fresh database on the test PostgreSQL or
`--postgres`, dropped at the end):

1. A real `serve` on the empty store launches one held job (`begin: now+1hour`) on the test
   cluster's `cluster` resource: its stored record (spec, effective spec, plan, script,
   history) is the template of every job; serve stops.
2. `--jobs` copies are bulk-inserted (SQLAlchemy Core, batches of 5,000), each with its own
   id, half of them alice's (the user read below) and the rest spread over nine other
   users, created over the last 30 days; `--active` of them (spread at random) are
   unsettled (`queued`) with Slurm ids no Slurm job has (above 90,000,000: the poller finds
   them in neither squeue nor sacct and leaves them as they are), the others completed,
   failed or canceled.
3. A real `serve` is started on it: the time until it answers HTTP and until `/ready` (its
   start-up work done: reconcile), its RSS then; then, `--repeat` times each, one after
   another on a keep-alive connection as alice: getJobs' first page and a deep one (offset
   5,000, limit 100, her finished jobs included: `historical`), the extension's page of all
   her jobs with their count (`GET /compute/jobs`, `total`) first and deep, and getJob of
   one of her jobs (a different one each time); median and p90 of the wall time, serve's
   CPU ms per request (its processes, from /proc), the answers' sizes; RSS at the end.

    SLURM_CONF=/tmp/iri-cluster/slurm.conf .venv/bin/python benchmarks/bench_scale.py \\
        --jobs 100000 --active 10000 --stores sqlite,pg
    ... --quick     # 2,000 jobs, 200 active, 5 repeats (checks the script, not the speed)
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from _common import (
    POSTGRES_OPTION,
    Option,
    cluster_run,
    fresh_database,
    launch_held,
    parse_options,
    postgres_url,
    rss_bytes,
    server_processes,
    tree_spent,
    tree_times,
    wait_ready,
)
from bench_iri import UNHURRIED
from bench_launch import RESOURCE, percentile
from sqlalchemy import create_engine, select

from iri_gateway.service.operations.database import normalise_url
from iri_gateway.service.operations.schema import JobRow
from tests.integration.gateway_process import API
from tests.support.serve import issue_token, running_serve

MIB = 1024 * 1024
USER = "alice"
OTHERS = [f"user{n}" for n in range(1, 10)]
SETTLED = [("completed", 0), ("failed", 1), ("canceled", None)]
BATCH = 5000
DAY = 86400.0


@contextmanager
def store_url(kind: str, folder: Path, server: str | None) -> Iterator[str]:
    """The URL of an empty store of this kind: SQLite in `folder`, or a fresh PostgreSQL
    database (dropped afterwards)."""
    if kind == "sqlite":
        yield f"sqlite:///{folder / 'jobs.db'}"
        return
    with fresh_database(postgres_url(server)) as (url, _, _):
        yield url


def template(url: str, job_id: str) -> dict[str, Any]:
    """The stored row of the launched job, as a dict of its columns."""
    engine = create_engine(normalise_url(url))
    try:
        with engine.connect() as connection:
            row = connection.execute(select(JobRow.__table__).where(JobRow.id == job_id)).one()
    finally:
        engine.dispose()
    return dict(row._mapping)


def fill(url: str, model: dict[str, Any], jobs: int, active: int) -> tuple[float, list[str]]:
    """`jobs` copies of `model` inserted; seconds taken and alice's job ids."""
    chance = random.Random(25)
    unsettled = set(chance.sample(range(jobs), active))
    now = time.time()
    last = model["history"][-1] if model["history"] else {}
    mine: list[str] = []
    engine = create_engine(normalise_url(url))
    start = time.perf_counter()
    try:
        with engine.begin() as connection:
            rows: list[dict[str, Any]] = []
            for number in range(jobs):
                owner = USER if number % 2 == 0 else OTHERS[number // 2 % len(OTHERS)]
                created = now - chance.uniform(0, 30 * DAY)
                row = {
                    **model,
                    "id": str(uuid.uuid4()),
                    "owner": owner,
                    "created_at": created,
                    "updated_at": created + chance.uniform(1, 3600),
                    "submit_attempted_at": created,
                    "claimed_by": None,
                }
                if number in unsettled:
                    row.update(state="queued", native_id=str(90_000_000 + number))
                else:
                    state, code = SETTLED[number % len(SETTLED)]
                    ending = {**last, "state": state, "time": row["updated_at"]}
                    row.update(
                        state=state,
                        exit_code=code,
                        native_id=str(80_000_000 + number),
                        history=[*model["history"], ending],
                    )
                if owner == USER:
                    mine.append(row["id"])
                rows.append(row)
                if len(rows) == BATCH:
                    connection.execute(JobRow.__table__.insert(), rows)
                    rows = []
            if rows:
                connection.execute(JobRow.__table__.insert(), rows)
    finally:
        engine.dispose()
    return time.perf_counter() - start, mine


def timed(client: httpx.Client, pids: list[int], label: str, calls: list[tuple[str, str]]) -> str:
    """Each (method, path) asked once, in turn, on one connection: a line of figures."""
    before = [tree_times(pid) for pid in pids]
    seconds: list[float] = []
    size = 0
    for method, path in calls:
        start = time.perf_counter()
        answer = client.request(method, path)
        seconds.append((time.perf_counter() - start) * 1000)
        if answer.status_code != 200:
            raise SystemExit(
                f"{label}: {method} {path} answered {answer.status_code}: {answer.text}"
            )
        size = len(answer.content)
    cpu = sum(tree_spent(b, tree_times(pid)) for b, pid in zip(before, pids, strict=True))
    return (
        f"  {label:<38} median {statistics.median(seconds):8.1f} ms, p90 "
        f"{percentile(seconds, 0.9):8.1f} ms, serve CPU {cpu / len(calls) * 1000:7.1f} ms/request,"
        f" answer {size / 1024:7.1f} KiB"
    )


def measure(
    kind: str, folder: Path, profile: Path, args: argparse.Namespace, names: list[str], run: str
) -> None:
    """One store: the template job, the bulk insert, then serve started on it and read."""
    data = folder / kind
    data.mkdir()
    with store_url(kind, data, args.postgres) as url:
        env = {**UNHURRIED, "IRI_GATEWAY_DATABASE_URL": url}
        token = issue_token(data, USER, "proj1", env)
        serve_args = ("--profiles", str(profile))
        with running_serve(data, args=serve_args, extra_env=env, log=folder / f"{kind}-1.log") as s:
            wait_ready(s.url)
            names.append(f"{run}-{kind}")
            model = template(url, launch_held(s.url, token, names[-1], 1)[0]["id"])
        spent, mine = fill(url, model, args.jobs, args.active)
        print(f"{kind}: {args.jobs} jobs ({args.active} unsettled) inserted in {spent:.1f} s")
        start = time.perf_counter()
        with running_serve(
            data, args=serve_args, extra_env=env, log=folder / f"{kind}-2.log", timeout=600
        ) as served:
            answering = time.perf_counter() - start
            wait_ready(served.url)
            ready = time.perf_counter() - start
            pids = server_processes(served.process.pid)
            print(
                f"  start-up: answers after {answering:.2f} s, ready after {ready:.2f} s; RSS "
                f"{rss_bytes(pids) / MIB:.1f} MiB"
            )
            headers = {"Authorization": f"Bearer {token}", "X-IRI-Facility-Project": "proj1"}
            repeat = args.repeat
            with httpx.Client(base_url=served.url + API, headers=headers, timeout=120) as client:
                status = f"/compute/status/{RESOURCE}"
                for label, call in [
                    ("getJobs, first page (100)", ("POST", f"{status}?historical=true")),
                    (
                        "getJobs, offset 5,000 (100)",
                        ("POST", f"{status}?historical=true&offset=5000"),
                    ),
                    ("the user's jobs and count, first (100)", ("GET", "/compute/jobs?limit=100")),
                    (
                        "the user's jobs and count, offset 5,000",
                        ("GET", "/compute/jobs?limit=100&offset=5000"),
                    ),
                ]:
                    print(timed(client, pids, label, [call] * repeat), flush=True)
                total = client.get("/compute/jobs?limit=1").json()["total"]
                print(f"  the user's job count: {total} (inserted: {len(mine)} + 1 launched)")
                ids = random.Random(5).sample(mine, min(repeat, len(mine)))
                calls = [("GET", f"{status}/{job_id}") for job_id in ids]
                print(timed(client, pids, "getJob (a different job each time)", calls))
            print(f"  RSS after the reads {rss_bytes(pids) / MIB:.1f} MiB", flush=True)


OPTIONS: list[Option] = [
    ("--jobs", int, 100_000, "jobs in the store"),
    ("--active", int, 10_000, "of them unsettled"),
    ("--stores", str, "sqlite,pg", "sqlite, pg or both"),
    ("--repeat", int, 20, "requests of each kind"),
    POSTGRES_OPTION,
]


def main() -> None:
    args = parse_options(__doc__, OPTIONS, {"jobs": 2000, "active": 200, "repeat": 5})
    if args.jobs < 10_200 and not args.quick:
        print("fewer than 10,200 jobs: alice has fewer than 5,100, the deep pages are short")
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    if not stores or set(stores) - {"sqlite", "pg"}:
        raise SystemExit(f"--stores {args.stores!r}: offered sqlite, pg or both")
    with cluster_run("bench-scale") as (folder, profile, run, names):
        for kind in stores:
            measure(kind, folder, profile, args, names, run)


if __name__ == "__main__":
    main()
