"""Several gateway processes on one store (`iri_gateway.service.operations.replicas`,
`JobStore.claim`):
exactly one replica sends a job, a dead replica's work is taken over and a live one's never,
leases change hands only when their holder dies, a SQLite store refuses a second process,
and no replica reads a state another one has changed from a cache.

Run on SQLite and on a real PostgreSQL (`tests/databases.py`) where both apply.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from iri_gateway.models.job import JobState
from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.operations.backends import Backends
from iri_gateway.service.operations.replicas import Replica, SharedSqliteError
from iri_gateway.service.operations.store import JobRecord, JobStore
from tests.conftest import recorded_job
from tests.service.jobs.test_engine_local import shell_job, wait_for


class Clock:
    """A clock the test moves: heartbeats age without waiting."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def sleeper() -> Iterator[int]:
    """The pid of a live process that is not this one (a replica on this host that lives)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


def new_job(store: JobStore, claimed_by: str | None = None) -> JobRecord:
    return recorded_job(store, submitting=True, claimed_by=claimed_by)


def test_of_many_replicas_claiming_one_job_at_once_exactly_one_wins(database_url: str) -> None:
    store = JobStore(database_url)
    replicas = [Replica(store) for _ in range(8)]
    live = [r.id for r in replicas]
    for round_ in range(5):
        job = new_job(store)
        won: list[str] = []
        start = threading.Barrier(len(replicas))

        def claim(replica: Replica, job_id: str, start: threading.Barrier, won: list[str]) -> None:
            start.wait()
            if store.claim(job_id, replica.id, live=live):
                won.append(replica.id)

        threads = [threading.Thread(target=claim, args=(r, job.id, start, won)) for r in replicas]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(won) == 1, f"round {round_}: {len(won)} replicas claimed the job"
        record = store.get(job.id)
        assert record is not None and record.claimed_by == won[0]


def test_a_live_replicas_claim_holds_and_a_dead_ones_is_taken_over(
    postgres_url: str, sleeper: int
) -> None:
    """(PostgreSQL: a SQLite store refuses a second live process.)"""
    clock = Clock()
    store = JobStore(postgres_url)
    sender = Replica(store, clock=clock, pid=sleeper, timeout=10)  # alive: its pid runs
    other = Replica(store, clock=clock, timeout=10)
    job = new_job(store, claimed_by=sender.id)
    assert other.others()[0].id == sender.id
    assert not store.claim(job.id, other.id, live=other.live()), "the sender lives"
    clock.now += 9
    assert not store.claim(job.id, other.id, live=other.live()), "9 s < the 10 s timeout"
    clock.now += 2  # the sender's heartbeat is 11 s old: it is dead
    assert sender.id not in other.live()
    assert store.claim(job.id, other.id, live=other.live())
    record = store.get(job.id)
    assert record is not None and record.claimed_by == other.id
    store.release(job.id, sender.id)  # a late release by the old holder changes nothing
    record = store.get(job.id)
    assert record is not None and record.claimed_by == other.id
    store.release(job.id, other.id)
    record = store.get(job.id)
    assert record is not None and record.claimed_by is None


def test_a_replica_whose_process_is_gone_from_this_host_is_dead_at_once(database_url: str) -> None:
    """A restart after kill -9 need not wait for the dead process's heartbeat to age."""
    store = JobStore(database_url)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = Replica(store, pid=int(gone.stdout))
    job = new_job(store, claimed_by=dead.id)
    survivor = Replica(store)
    assert dead.id not in survivor.live()
    assert store.claim(job.id, survivor.id, live=survivor.live())


def test_a_gone_pid_of_another_pid_namespace_says_nothing(postgres_url: str) -> None:
    """Two containers can share a host name (host networking) but not their pids: a replica
    of another pid namespace is judged by its heartbeat only, never by a pid looked up here."""
    from sqlalchemy import update

    from iri_gateway.service.operations.schema import ReplicaRow

    store = JobStore(postgres_url)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    elsewhere = Replica(store, pid=int(gone.stdout))
    with store.engine.begin() as connection:
        connection.execute(
            update(ReplicaRow)
            .where(ReplicaRow.id == elsewhere.id)
            .values(pid_space="another-boot pid:[4026532000]")
        )
    job = new_job(store, claimed_by=elsewhere.id)
    here = Replica(store)
    assert elsewhere.id in here.live(), "its heartbeat is fresh"
    assert not store.claim(job.id, here.id, live=here.live())


def test_a_stopped_replica_gives_up_its_claims_and_leases(database_url: str) -> None:
    store = JobStore(database_url)
    first, second = Replica(store), Replica(store)
    job = new_job(store, claimed_by=first.id)
    assert first.hold(["poll:local", "poll:cluster"]) == {"poll:local", "poll:cluster"}
    assert second.hold(["poll:local", "poll:cluster"]) == set(), "held by a live replica"
    first.stop()
    record = store.get(job.id)
    assert record is not None and record.claimed_by is None
    assert first.id not in second.live()
    assert second.hold(["poll:local", "poll:cluster"]) == {"poll:local", "poll:cluster"}
    assert second.leases() == ["poll:cluster", "poll:local"]


def test_a_lease_passes_to_another_replica_only_when_its_holder_dies(
    postgres_url: str, sleeper: int
) -> None:
    clock = Clock()
    store = JobStore(postgres_url)
    holder = Replica(store, clock=clock, pid=sleeper, timeout=5)
    others = [Replica(store, clock=clock, timeout=5) for _ in range(4)]
    assert holder.hold(["poll:local"]) == {"poll:local"}
    for _ in range(3):
        clock.now += 2
        holder.beat()
        assert all(o.hold(["poll:local"]) == set() for o in others)
        assert holder.hold(["poll:local"]) == {"poll:local"}
    for other in others:
        other.beat()
    clock.now += 6  # the holder stopped beating 6 s ago; the others beat now
    for other in others:
        other.beat()
    winners: list[str] = []
    start = threading.Barrier(len(others))

    def take(replica: Replica) -> None:
        start.wait()
        if replica.hold(["poll:local"]):
            winners.append(replica.id)

    threads = [threading.Thread(target=take, args=(o,)) for o in others]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(winners) == 1, f"{len(winners)} replicas took the lease"
    assert holder.hold(["poll:local"]) == set(), "the old holder finds it taken"


def test_a_second_live_process_on_one_sqlite_store_is_refused(tmp_path: Path, sleeper: int) -> None:
    url = f"sqlite:///{tmp_path}/jobs.db"
    Replica(JobStore(url), pid=sleeper)  # another process of this host, alive
    with pytest.raises(SharedSqliteError) as refused:
        Replica(JobStore(url))
    message = str(refused.value)
    assert f"pid {sleeper}" in message and "PostgreSQL" in message and "--database-url" in message


def test_a_sqlite_store_left_by_a_dead_or_stopped_process_is_taken(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/jobs.db"
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    Replica(JobStore(url), pid=int(gone.stdout))  # killed: its process is gone
    stopped = Replica(JobStore(url), pid=1)
    stopped.stop()
    Replica(JobStore(url))  # neither keeps the store


def test_postgresql_reads_are_never_served_from_a_stale_cache(postgres_url: str) -> None:
    """What one replica's poller writes, another replica's getJob shows at once."""
    reader, writer = JobStore(postgres_url), JobStore(postgres_url)
    job = new_job(reader)
    assert reader.get(job.id) is not None  # read once: a cache would now hold it
    writer.set_native_id(job.id, "42", "submitted as 42")
    writer.transition(job.id, JobState.ACTIVE, "running")
    seen = reader.get(job.id)
    assert seen is not None and (seen.state, seen.native_id) == (JobState.ACTIVE, "42")


def two_engines(url: str, clock: Clock, tmp_path: Path, pid: int) -> tuple[Engine, Engine]:
    """Two engines on one store, as two replicas would be; the first's process lives."""

    def engine(name: str, **replica: object) -> Engine:
        store = JobStore(url)
        return Engine(
            registry=ProfileRegistry.from_files([builtin_profile("local")]),
            store=store,
            backends=Backends(tmp_path / name),
            clock=clock,
            replica=Replica(store, clock=clock, timeout=10, **replica),
        )  # type: ignore[arg-type]

    return engine("a", pid=pid), engine("b")


def test_the_reconcile_leaves_a_live_replicas_submission_and_takes_a_dead_ones(
    postgres_url: str, tmp_path: Path, sleeper: int
) -> None:
    clock = Clock(__import__("time").time())
    a, b = two_engines(postgres_url, clock, tmp_path, sleeper)
    # A job replica A recorded and claimed, as if its sbatch were running now.
    spec = shell_job("echo taken-over")
    effective = spec.model_copy(
        update={"directory": str(tmp_path / "b" / "job"), "stdout_path": "out.txt"}
    )
    from iri_gateway.planning.planner import make_plan

    plan = make_plan(effective, a.registry.get("local"))
    record = a.store.create(
        owner="alice",
        resource_id="local",
        spec=spec.model_dump(mode="json", exclude_unset=True),
        effective_spec=effective.model_dump(mode="json", exclude_unset=True),
        plan=plan.model_dump(mode="json", exclude={"script"}),
        script=plan.script,
        submitting=True,
        claimed_by=a.replica.id,
    )
    assert b.reconcile(settle=5) == [], "replica A lives and is sending it"
    stored = b.store.get(record.id)
    assert stored is not None and stored.state == JobState.NEW and stored.native_id is None
    clock.now += 11  # A's heartbeat is 11 s old; the attempt is older than the settle time
    b.replica.beat()
    actions = b.reconcile(settle=5)
    assert actions == [f"{record.id}: resubmitted (the scheduler never saw it)"]
    done = wait_for(b, record.id, lambda r: r.state.final)
    assert done.state == JobState.COMPLETED and done.claimed_by is None
    assert b.reconcile(settle=5) == []


def test_on_sqlite_the_heartbeat_and_the_leases_write_in_the_job_stores_turn(
    tmp_path: Path,
) -> None:
    """A heartbeat written beside the job store's turns could hold SQLite's lock while its
    thread waited for the interpreter, and a job write past SQLite's busy time-out failed
    ("database is locked", a 500 in a CI run of 64 launches at once). Every writer of one
    process now takes the store's turn: while a job write holds it, the heartbeat and a
    lease wait, then go through."""
    store = JobStore(f"sqlite:///{tmp_path}/jobs.db")
    replica = Replica(store)
    beaten, leased = threading.Event(), threading.Event()
    with store.writing():
        threading.Thread(target=lambda: replica.beat() and beaten.set()).start()
        threading.Thread(target=lambda: replica.hold(["poll:local"]) and leased.set()).start()
        assert not beaten.wait(0.5) and not leased.is_set(), "they wait for the turn"
    assert beaten.wait(10) and leased.wait(10), "and go through after it"
    assert replica.leases() == ["poll:local"]
