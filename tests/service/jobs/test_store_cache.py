"""The SQLite store's record cache is never behind the database: a read from the database
that a write overtook does not replace the written record, and the event log's readers are
woken only once the cache holds what the commit wrote (a stream renders each event with the
job as getJob shows it: it must show the state the event records)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.models.job import JobState
from iri_gateway.service.operations import store as store_module
from iri_gateway.service.operations.store import JobRecord, JobStore
from tests.conftest import recorded_job


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[JobStore, JobStore]]:
    """Two stores of one SQLite database: the first makes jobs the second has not cached."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    maker, reader = JobStore(url), JobStore(url)
    yield maker, reader
    maker.close()
    reader.close()


WRITES: dict[str, Callable[[JobStore, str], object]] = {
    "transition": lambda store, job_id: store.transition(job_id, JobState.COMPLETED, "done"),
    "claim": lambda store, job_id: store.claim(job_id, "replica-b", live=[]),
    "release_all": lambda store, job_id: store.release_all("replica-a"),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_read_overtaken_by_a_write_does_not_replace_what_was_written(
    stores: tuple[JobStore, JobStore], monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    maker, store = stores
    job = recorded_job(maker)
    maker.claim(job.id, "replica-a", live=[])
    read = store_module._read
    overtaken: list[JobRecord] = []

    def read_then_write(values: Any) -> JobRecord:
        """The row read; before the reader keeps it, a write of the job commits."""
        record = read(values)
        if not overtaken:
            overtaken.append(record)
            WRITES[write](store, job.id)
        return record

    monkeypatch.setattr(store_module, "_read", read_then_write)
    first = store.get(job.id)
    assert first is not None and overtaken == [first]
    assert (first.state, first.claimed_by) == (JobState.NEW, "replica-a")
    monkeypatch.setattr(store_module, "_read", read)
    now = store.get(job.id)
    assert now is not None
    expected = {
        "transition": (JobState.COMPLETED, "replica-a"),
        "claim": (JobState.NEW, "replica-b"),
        "release_all": (JobState.NEW, None),
    }[write]
    assert (now.state, now.claimed_by) == expected
    # `records` (the poller's read of several jobs) keeps the same rule.
    assert (store.records([job.id])[job.id].state, now.state) == (now.state, now.state)


def test_many_records_read_while_one_is_written_keep_the_written_one(
    stores: tuple[JobStore, JobStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    maker, store = stores
    jobs = [recorded_job(maker) for _ in range(3)]
    read = store_module._read
    calls: list[str] = []

    def read_then_write(values: Any) -> JobRecord:
        record = read(values)
        calls.append(record.id)
        if len(calls) == 1:
            store.transition(jobs[1].id, JobState.FAILED, "gone")
        return record

    monkeypatch.setattr(store_module, "_read", read_then_write)
    store.records([job.id for job in jobs])
    monkeypatch.setattr(store_module, "_read", read)
    assert store.get(jobs[1].id).state == JobState.FAILED  # type: ignore[union-attr]
    assert [store.get(job.id).state for job in jobs] == [  # type: ignore[union-attr]
        JobState.NEW,
        JobState.FAILED,
        JobState.NEW,
    ]


def test_the_event_readers_wake_once_the_cache_holds_the_committed_state(
    stores: tuple[JobStore, JobStore],
) -> None:
    store = stores[1]
    job = recorded_job(store)
    store.set_native_id(job.id, "n1", "submitted as n1")
    seen: list[JobState | None] = []
    wake = store.event_signal.wake

    def look_then_wake() -> None:
        cached = store.cached(job.id)
        seen.append(cached.state if cached is not None else None)
        wake()

    store.event_signal.wake = look_then_wake  # type: ignore[method-assign]
    store.transition(job.id, JobState.ACTIVE, "started")
    store.transition_many(
        [store_module.StateChange(job_id=job.id, state=JobState.COMPLETED, message="done")]
    )
    assert seen == [JobState.ACTIVE, JobState.COMPLETED]


def test_a_rolled_back_write_leaves_the_cache_as_it_was(
    stores: tuple[JobStore, JobStore],
) -> None:
    maker, store = stores
    job = recorded_job(maker)
    assert store.get(job.id) is not None
    with pytest.raises(RuntimeError), store.writing() as session:
        store._on_commit(session, job.id, None)
        raise RuntimeError("the write failed")
    assert store.cached(job.id) is not None
