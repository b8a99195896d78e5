"""Idempotency keys under concurrent submissions, on SQLite and on a real PostgreSQL: the
unique constraint on (owner, key) decides, so threads of one process and separate processes
with the same key get one job between them, and the engine replays it to the losers."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile
from iri_gateway.service.jobs.engine import Engine, IdempotencyConflictError
from iri_gateway.service.operations.backends import Backends
from iri_gateway.service.operations.database import normalise_url
from iri_gateway.service.operations.store import IdempotencyKeyTakenError, JobRecord, JobStore
from tests.conftest import recorded_job

RACERS = 8


def create_with_key(store: JobStore, key: str) -> JobRecord:
    return recorded_job(store, idempotency_key=key)


def rows_with_key(url: str, key: str) -> int:
    engine = create_engine(normalise_url(url))
    try:
        with engine.connect() as connection:
            return int(
                connection.execute(
                    text("SELECT count(*) FROM jobs WHERE idempotency_key = :key"), {"key": key}
                ).scalar_one()
            )
    finally:
        engine.dispose()


def test_threads_with_one_key_make_one_job(database_url: str) -> None:
    store = JobStore(database_url)
    barrier = threading.Barrier(RACERS)
    made: list[str] = []
    lost: list[str] = []
    errors: list[BaseException] = []

    def race() -> None:
        barrier.wait()
        try:
            made.append(create_with_key(store, "same").id)
        except IdempotencyKeyTakenError as taken:
            lost.append(taken.earlier.id)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=race) for _ in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len(made) == 1 and len(lost) == RACERS - 1
    assert set(lost) == set(made), "every loser is told the winner's job"
    assert rows_with_key(database_url, "same") == 1


def _racer(url: str, key: str, start: Any, results: Any) -> None:
    store = JobStore(url)
    start.wait()
    try:
        results.put(("made", create_with_key(store, key).id))
    except IdempotencyKeyTakenError as taken:
        results.put(("lost", taken.earlier.id))
    except Exception as error:
        results.put(("error", repr(error)))


def test_processes_with_one_key_make_one_job(database_url: str) -> None:
    JobStore(database_url)  # the schema exists before the racers open the store
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    processes = [
        context.Process(target=_racer, args=(database_url, "k", start, results)) for _ in range(4)
    ]
    for process in processes:
        process.start()
    # Each process opens its store before the start signal (the spawn imports take a while).
    start.set()
    outcomes = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert [kind for kind, _ in outcomes].count("made") == 1, outcomes
    assert {kind for kind, _ in outcomes} == {"made", "lost"}, outcomes
    assert len({job_id for _, job_id in outcomes}) == 1
    assert rows_with_key(database_url, "k") == 1


def test_processes_starting_together_migrate_once(database_url: str) -> None:
    """Four stores opened at once on an empty database: the migration runs once (the
    others wait for its lock and find the schema made), and all of them work."""
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    processes = [
        context.Process(target=_racer, args=(database_url, f"k{i}", start, results))
        for i in range(4)
    ]
    start.set()  # open and create at once: the migration itself races
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    assert sorted(kind for kind, _ in outcomes) == ["made"] * 4, outcomes
    assert len(JobStore(database_url).find()) == 4


def _open_new_databases_at_once(folder: str, rounds: int, results: Any) -> None:
    """In a process of its own (no threads, so forking is safe): `rounds` times, six forked
    processes open one new SQLite database at the same moment. Forks start in microseconds,
    where spawned processes spread out over their imports and seldom meet."""
    racers = multiprocessing.get_context("fork")
    failures: list[str] = []
    for round_number in range(rounds):
        url = f"sqlite:///{folder}/round{round_number}.db"
        start, outcomes = racers.Event(), racers.Queue()
        processes = [
            racers.Process(target=_open_store, args=(url, start, outcomes)) for _ in range(6)
        ]
        for process in processes:
            process.start()
        start.set()
        failures += [o for o in (outcomes.get(timeout=60) for _ in processes) if o != "ok"]
        for process in processes:
            process.join(timeout=60)
    results.put(failures)


def _open_store(url: str, start: Any, outcomes: Any) -> None:
    start.wait()
    try:
        JobStore(url)
        outcomes.put("ok")
    except Exception as error:
        outcomes.put(repr(error))


def test_processes_opening_one_new_sqlite_database_at_once_all_open_it(tmp_path: Path) -> None:
    """The switch of a new database to WAL races, and SQLite answers the loser "database is
    locked" at once, without its busy wait: a gateway starting beside another failed so in
    CI; without the retry a few of these 30 rounds fail)."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    launcher = context.Process(
        target=_open_new_databases_at_once, args=(str(tmp_path), 30, results)
    )
    launcher.start()
    failures = results.get(timeout=240)
    launcher.join(timeout=60)
    assert failures == []


def spec(command: str) -> Any:
    return parse_jobspec({"executable": "/bin/sh", "arguments": ["-c", command]})


def test_the_engine_replays_a_key_won_by_a_concurrent_submission(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two submissions with one key both look the key up before either records it (held at
    a barrier, so the race happens every time): one runs, the other gets its job back as a
    replay; a different request with that key is a conflict, never a second job."""
    registry = ProfileRegistry.from_files([builtin_profile("local")])
    engine = Engine(registry=registry, store=JobStore(database_url), backends=Backends(tmp_path))
    barrier = threading.Barrier(2)
    look_up = engine.store.by_idempotency_key
    first_looks = iter(range(2))

    def racing_look_up(owner: str, key: str) -> JobRecord | None:
        if next(first_looks, None) is not None:
            found = look_up(owner, key)
            barrier.wait(timeout=30)
            return found
        return look_up(owner, key)

    monkeypatch.setattr(engine.store, "by_idempotency_key", racing_look_up)
    submissions = []
    lock = threading.Lock()

    def submit() -> None:
        result = engine.submit(
            owner="alice", resource_id="local", spec=spec("true"), idempotency_key="k"
        )
        with lock:
            submissions.append(result)

    threads = [threading.Thread(target=submit) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(s.replayed for s in submissions) == [False, True]
    assert len({s.record.id for s in submissions}) == 1
    assert len(engine.store.find(owner="alice")) == 1
    assert engine.store.find(owner="alice")[0].state != JobState.FAILED
    with pytest.raises(IdempotencyConflictError):
        engine.submit(owner="alice", resource_id="local", spec=spec("false"), idempotency_key="k")
    engine.close()
