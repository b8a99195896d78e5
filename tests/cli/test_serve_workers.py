"""`iri-gateway serve --workers N` (issue 25): N serving processes on one socket, each a replica
on the shared PostgreSQL store, and the refusals that keep a SQLite store to one process.

The servers are real `serve` commands on a fresh PostgreSQL database; which worker answered
a request is told by `/ready` (the replica's id and pid), the workers by the `replicas` rows
of the database whose pid is a child of the `serve` process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.engine import Engine as SqlEngine
from uvicorn.config import STARTUP_FAILURE

from iri_gateway.cli.serving import worker_count
from iri_gateway.service.operations.schema import LeaseRow, ReplicaRow
from iri_gateway.service.operations.settings import Settings
from tests.support.serve import CLI, clean_env, issue_token, running_serve

V2 = "/api/v2"
FAST = {"IRI_GATEWAY_POLL_SLOW": "2"}


@pytest.fixture
def database(postgres_url: str) -> Iterator[SqlEngine]:
    engine = create_engine(postgres_url)
    yield engine
    engine.dispose()


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """`condition()`'s first true value; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.2)
    return value


def parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def live_workers(database: SqlEngine, serve_pid: int) -> dict[int, str]:
    """pid -> replica id of the replicas registered, not stopped, whose process is a child
    of `serve` now."""
    with database.connect() as connection:
        rows = connection.execute(
            select(ReplicaRow.pid, ReplicaRow.id).where(ReplicaRow.stopped_at.is_(None))
        ).all()
    return {pid: id_ for pid, id_ in rows if parent_of(pid) == serve_pid}


def workers_if(
    database: SqlEngine, serve_pid: int, count: int, gone: int | None = None
) -> dict[int, str] | None:
    """The live workers when they are COUNT and GONE is not among them, else None."""
    workers = live_workers(database, serve_pid)
    return workers if len(workers) == count and gone not in workers else None


def answering(url: str) -> tuple[int, str]:
    """The pid and replica id of the worker that answered `/ready` on a new connection."""
    answer = httpx.get(f"{url}/ready", headers={"Connection": "close"}, timeout=30)
    assert answer.status_code == 200, answer.text
    details = answer.json()["details"]
    return details["pid"], details["replica"]


def test_worker_count_defaults_to_the_cores_with_postgresql_and_one_with_sqlite(
    tmp_path: Path,
) -> None:
    postgres = "postgresql://u@127.0.0.1/db"
    cores = len(os.sched_getaffinity(0))
    assert worker_count(Settings(data_dir=tmp_path)) == 1
    assert worker_count(Settings(data_dir=tmp_path, database_url=postgres)) == cores
    assert worker_count(Settings(data_dir=tmp_path, database_url=postgres, workers=3)) == 3


def test_two_workers_share_the_store_replace_a_killed_one_and_stop_on_sigterm(
    tmp_path: Path, postgres_url: str, database: SqlEngine
) -> None:
    data = tmp_path / "data"
    token = issue_token(data, "alice", "p1")
    headers = {"Authorization": f"Bearer {token}", "X-IRI-Facility-Project": "p1"}
    env = {"IRI_GATEWAY_DATABASE_URL": postgres_url, **FAST}
    with running_serve(data, args=("--workers", "2"), extra_env=env, workers=None) as served:
        serve_pid = served.process.pid
        first = wait_until(
            lambda: workers_if(database, serve_pid, 2),
            60,
            "two workers registered as live replicas",
        )
        assert "2 workers on postgresql+psycopg://" in served.output()
        seen: set[tuple[int, str]] = set()

        def both_answered() -> bool:
            seen.add(answering(served.url))
            return seen >= set(first.items())

        wait_until(both_answered, 120, f"both workers {sorted(first)} answer")
        assert seen == set(first.items()), (seen, first)  # no one else answers

        launched = httpx.post(
            f"{served.url}{V2}/compute/job/local",
            json={"executable": "/bin/sh", "arguments": ["-c", "sleep 2; echo done"]},
            headers=headers,
            timeout=30,
        )
        assert launched.status_code == 200, launched.text
        job_id = launched.json()["id"]

        # kill -9 each worker that was there at the launch, one after the other: each is
        # replaced, and the service answers throughout (a new worker, or the other one)
        live = dict(first)
        for victim in sorted(first):
            os.kill(victim, signal.SIGKILL)
            live = wait_until(
                lambda v=victim: workers_if(database, serve_pid, 2, gone=v),
                90,
                f"worker {victim} replaced by a new live replica",
            )
            assert answering(served.url)[0] in live
        assert not set(live) & set(first), (first, live)

        # read by a worker that did not launch it (both of those are gone); tracked to
        # its end by the poller of a worker that took the dead ones' poll lease over
        def finished() -> dict[str, Any] | None:
            answer = httpx.get(
                f"{served.url}{V2}/compute/status/local/{job_id}", headers=headers, timeout=30
            )
            assert answer.status_code == 200, answer.text
            status: dict[str, Any] = answer.json()["status"]
            return status if status["state"] in ("completed", "failed", "canceled") else None

        status = wait_until(finished, 90, f"job {job_id} finished")
        assert status["state"] == "completed" and status["exit_code"] == 0, status
        with database.connect() as connection:
            holders = set(connection.scalars(select(LeaseRow.holder)).all())
        assert holders and holders <= set(live.values()), (holders, live)

        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(timeout=60) == 0, served.output()
        for pid in live:
            wait_until(lambda p=pid: parent_of(p) is None, 30, f"worker {pid} exited")
        with database.connect() as connection:
            running = connection.execute(
                select(ReplicaRow.pid).where(ReplicaRow.stopped_at.is_(None))
            ).all()
        # the killed workers never said they stopped; the ones SIGTERM stopped all did
        assert {pid for (pid,) in running} == set(first), (running, first)


def test_the_default_on_postgresql_is_one_worker_per_core(
    tmp_path: Path, postgres_url: str, database: SqlEngine
) -> None:
    cores = len(os.sched_getaffinity(0))
    env = {"IRI_GATEWAY_DATABASE_URL": postgres_url, **FAST}
    with running_serve(tmp_path / "data", extra_env=env, workers=None) as served:
        if cores == 1:  # serve is the one replica itself, as before workers
            wait_until(lambda: one_replica_is(database, served.process.pid), 60, "serve")
            return
        wait_until(
            lambda: len(live_workers(database, served.process.pid)) == cores,
            60,
            f"{cores} workers",
        )
        assert f"{cores} workers on postgresql+psycopg://" in served.output()


def one_replica_is(database: SqlEngine, pid: int) -> bool:
    with database.connect() as connection:
        pids = connection.scalars(select(ReplicaRow.pid)).all()
    return list(pids) == [pid]


def serve_refused(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    data = tmp_path / "data"
    done = subprocess.run(
        [*CLI, "serve", "--port", "1", "--data-dir", str(data), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean_env(), **(env or {})},
    )
    assert done.returncode != 0, done
    assert "Traceback" not in done.stderr, done.stderr
    return f"{done.returncode} {done.stderr}"


@pytest.mark.parametrize("how", ["option", "environment"])
def test_two_workers_on_sqlite_are_refused_before_anything_starts(tmp_path: Path, how: str) -> None:
    if how == "option":
        said = serve_refused(tmp_path, "--workers", "2")
    else:
        said = serve_refused(tmp_path, env={"IRI_GATEWAY_WORKERS": "2"})
    assert said.startswith("2 "), said
    for words in ("--workers", "IRI_GATEWAY_WORKERS", "SQLite", "one process", "PostgreSQL"):
        assert words in said, said
    data = tmp_path / "data"
    assert not (data / "jobs.db").exists() and not (data / "tokens.json").exists()


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (("--workers", "0"), {}, "--workers"),
        ((), {"IRI_GATEWAY_WORKERS": "0"}, "IRI_GATEWAY_WORKERS"),
        ((), {"IRI_GATEWAY_WORKERS": "4" + "0" * 40_000}, "IRI_GATEWAY_WORKERS"),
        (("--workers", "65", "--database-url", "postgresql://u@127.0.0.1:1/d"), {}, "64"),
    ],
)
def test_a_worker_count_below_one_or_absurd_is_refused(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], words: str
) -> None:
    said = serve_refused(tmp_path, *args, env=env)
    assert said.startswith("2 ") and words in said, said


def test_a_broken_profile_fails_the_command_once_before_the_workers(
    tmp_path: Path, postgres_url: str
) -> None:
    profile = tmp_path / "broken.yaml"
    profile.write_text("facility: {id: x}\nresources: 12\n")
    said = serve_refused(
        tmp_path,
        "--workers",
        "2",
        "--profiles",
        str(profile),
        env={"IRI_GATEWAY_DATABASE_URL": postgres_url},
    )
    assert said.startswith("1 ") and said.count("invalid profile") == 1, said


def test_workers_stop_and_deregister_when_serve_itself_is_killed(
    tmp_path: Path, postgres_url: str, database: SqlEngine
) -> None:
    """kill -9 of the `serve` process leaves no worker serving on its own: each gets SIGTERM
    from the kernel (PR_SET_PDEATHSIG) and stops as on a clean stop."""
    env = {"IRI_GATEWAY_DATABASE_URL": postgres_url, **FAST}
    with running_serve(
        tmp_path / "data", args=("--workers", "2"), extra_env=env, workers=None
    ) as served:
        workers = wait_until(lambda: workers_if(database, served.process.pid, 2), 60, "two workers")
        served.process.kill()
        served.process.wait(timeout=30)
        for pid in workers:
            wait_until(lambda p=pid: not Path(f"/proc/{p}").exists(), 60, f"worker {pid} ended")
    with database.connect() as connection:
        stopped = connection.execute(
            select(ReplicaRow.pid).where(ReplicaRow.stopped_at.is_not(None))
        ).all()
    assert {pid for (pid,) in stopped} == set(workers), (stopped, workers)


UNREACHABLE = "postgresql://nobody@127.0.0.1:1/nothing"
"""A PostgreSQL URL nothing answers."""


def test_an_unusable_database_fails_the_command_once_before_the_workers(tmp_path: Path) -> None:
    said = serve_refused(tmp_path, "--workers", "2", "--database-url", UNREACHABLE)
    assert said.startswith("1 ") and said.count("cannot use database") == 1, said
    assert "nobody@127.0.0.1:1/nothing" in said and "Started parent" not in said, said


def test_a_worker_that_cannot_start_stops_the_supervisor_instead_of_looping(
    tmp_path: Path,
) -> None:
    """uvicorn restarts a worker that exited with status 1 (its factory raised), forever;
    with uvicorn's start-up failure status (3) the supervisor stops every worker instead."""
    done = subprocess.run(
        [sys.executable, "-c", "from iri_gateway.cli.serving import application; application()"],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **clean_env(),
            "IRI_GATEWAY_DATA_DIR": str(tmp_path / "data"),
            "IRI_GATEWAY_DATABASE_URL": UNREACHABLE,
        },
    )
    assert done.returncode == STARTUP_FAILURE, (done.returncode, done.stderr)
    assert "cannot start: cannot use database" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
