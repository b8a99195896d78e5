"""A poll cycle costs what changed, not the queue (`JobStore.poll_entries`, `Tracking`): jobs
the scheduler reports as they are stored are read as a few columns in one query, and no full
record (spec, plan, script, history, members) is read or decoded for them; a job that changed
is updated as before, its full row read alone.

The scheduler is a stand-in batch system (it answers from a table the test sets, and counts
its calls) so that hundreds of jobs wait without hundreds of processes; the store is real,
on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from iri_gateway.models.job import JobState, NativeStatus
from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.jobs.poller import Poller
from iri_gateway.service.operations import store as store_module
from iri_gateway.service.operations.backends import Backends
from iri_gateway.service.operations.store import JobRecord, JobStore
from tests.conftest import stored_plan

WAITING = 300


class StandinBatch:
    """The scheduler's status query, answered from `jobs` (native id -> status)."""

    def __init__(self) -> None:
        self.jobs: dict[str, NativeStatus] = {}
        self.queries: list[set[str]] = []

    def statuses(self, native_ids: Collection[str]) -> dict[str, NativeStatus]:
        self.queries.append(set(native_ids))
        return {i: self.jobs[i] for i in native_ids if i in self.jobs}


@pytest.fixture
def engine(database_url: str, tmp_path: Path) -> Iterator[Engine]:
    registry = ProfileRegistry.from_files([builtin_profile("local")])
    made = Engine(registry=registry, store=JobStore(database_url), backends=Backends(tmp_path))
    yield made
    made.close()


def waiting_job(engine: Engine, number: int, *, owner: str = "alice", **plan: Any) -> JobRecord:
    """A job the scheduler has queued, stored as a real submission leaves it."""
    record = engine.store.create(
        owner=owner,
        resource_id="local",
        spec={"executable": "/bin/true", "name": f"job-{number}"},
        effective_spec={"executable": "/bin/true", "directory": f"/tmp/job-{number}"},
        plan=stored_plan(**plan),
        script="#!/bin/sh\ntrue\n" + "# padding\n" * 50,
    )
    return engine.store.set_native_id(record.id, str(10_000 + number), "submitted")


@contextmanager
def watched(store: JobStore) -> Iterator[tuple[list[str], list[str]]]:
    """The SQL statements run and the full records built (`_record`) meanwhile."""
    statements: list[str] = []
    built: list[str] = []
    real_record = store_module._record

    def count_record(row: Any) -> JobRecord:
        built.append(row.id)
        return real_record(row)

    def before(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    event.listen(store.engine, "before_cursor_execute", before)
    store_module._record = count_record
    try:
        yield statements, built
    finally:
        store_module._record = real_record
        event.remove(store.engine, "before_cursor_execute", before)


def reads_full_rows(statement: str) -> bool:
    """A SELECT of the jobs table's large columns (what decoding a full record needs)."""
    text = " ".join(statement.split()).lower()
    return text.startswith("select") and ("jobs.script" in text or "jobs.history" in text)


def test_a_cycle_over_unchanged_jobs_reads_no_full_record(engine: Engine) -> None:
    batch = StandinBatch()
    engine.backends.get(engine.registry.get("local"), "alice").batch = batch  # type: ignore[assignment]
    jobs = [waiting_job(engine, n) for n in range(WAITING)]
    cluster = waiting_job(engine, WAITING, cluster_size=2)
    for record in [*jobs, cluster]:
        assert record.native_id is not None
        batch.jobs[record.native_id] = NativeStatus(record.native_id, JobState.QUEUED, "PENDING")
    poller = Poller(engine)
    assert poller.cycle(force=True) == {"local": WAITING + 1}, "each now says PENDING"

    with watched(engine.store) as (statements, built):
        assert poller.cycle(force=True) == {"local": 0}
    assert built == [], f"{len(built)} full records built for jobs that did not change"
    assert [s for s in statements if reads_full_rows(s)] == []
    assert len(batch.queries) == 2, "one status query per cycle for the resource"
    assert len(batch.queries[-1]) == WAITING + 1

    # One job starts: it alone is read in full and updated as before (history, message).
    changed = jobs[7]
    assert changed.native_id is not None
    batch.jobs[changed.native_id] = NativeStatus(changed.native_id, JobState.ACTIVE, "RUNNING")
    with watched(engine.store) as (statements, built):
        assert poller.cycle(force=True) == {"local": 1}
    assert built == [changed.id]
    current = engine.store.get(changed.id)
    assert current is not None and current.state == JobState.ACTIVE
    assert current.message == "RUNNING"
    assert [h["state"] for h in current.history] == ["new", "queued", "queued", "active"]
    assert [h["message"] for h in current.history][-2:] == ["PENDING", "RUNNING"]
    unchanged = engine.store.get(jobs[8].id)
    assert unchanged is not None and unchanged.state == JobState.QUEUED


def test_a_running_cluster_job_alone_is_read_in_full(engine: Engine) -> None:
    """A cluster job needs its members' files read while it runs: its record (and only
    its) is read in full, in one query, and its size comes from the light query."""
    batch = StandinBatch()
    engine.backends.get(engine.registry.get("local"), "alice").batch = batch  # type: ignore[assignment]
    plain = [waiting_job(engine, n) for n in range(20)]
    cluster = waiting_job(engine, 99, cluster_size=3)
    for record in [*plain, cluster]:
        assert record.native_id is not None
        batch.jobs[record.native_id] = NativeStatus(record.native_id, JobState.QUEUED, "PENDING")
    (entry,) = [e for e in engine.store.poll_entries(["local"]) if e.id == cluster.id]
    assert entry.cluster_size == 3
    assert {e.cluster_size for e in engine.store.poll_entries() if e.id != cluster.id} == {None}
    poller = Poller(engine)
    poller.cycle(force=True)
    assert cluster.native_id is not None
    batch.jobs[cluster.native_id] = NativeStatus(cluster.native_id, JobState.ACTIVE, "RUNNING")
    poller.cycle(force=True)  # turns active (its members' files are not there: unread)
    with watched(engine.store) as (_, built):
        assert poller.cycle(force=True) == {"local": 0}
    assert set(built) <= {cluster.id}, "only the running cluster job may be read in full"
    current = engine.store.get(cluster.id)
    assert current is not None and current.state == JobState.ACTIVE


def test_the_reconcile_reads_in_full_only_what_it_acts_on(engine: Engine) -> None:
    batch = StandinBatch()
    engine.backends.get(engine.registry.get("local"), "alice").batch = batch  # type: ignore[assignment]
    for n in range(50):
        record = waiting_job(engine, n)
        assert record.native_id is not None
        batch.jobs[record.native_id] = NativeStatus(record.native_id, JobState.QUEUED, "PENDING")
    with watched(engine.store) as (statements, built):
        assert engine.reconcile(engine.store.poll_entries()) == []
        assert engine.reconcile() == []
    assert built == []
    assert [s for s in statements if reads_full_rows(s)] == []


def test_one_status_query_per_cycle_for_the_jobs_of_three_users(engine: Engine) -> None:
    """On a resource whose commands all run as the gateway's own account, the jobs of every
    user are asked for in one query. (An SSH resource asks once per mapped account: each
    account's login lists its own jobs, see `Tracking.refresh`.)"""
    batch = StandinBatch()
    for owner in ("alice", "bob", "carol"):
        engine.backends.get(engine.registry.get("local"), owner).batch = batch  # type: ignore[assignment]
    records = [waiting_job(engine, n, owner=("alice", "bob", "carol")[n % 3]) for n in range(9)]
    for record in records:
        assert record.native_id is not None
        batch.jobs[record.native_id] = NativeStatus(record.native_id, JobState.QUEUED, "PENDING")
    assert Poller(engine).cycle(force=True) == {"local": 9}
    assert batch.queries == [{r.native_id for r in records}]
