"""The event log (issue 28, items 1 and 5), on SQLite and on a real PostgreSQL:

- each state change writes its event in the change's own transaction: one that fails
  leaves neither; a job's creation, its moves, its cluster members' moves and a task's
  moves are all there, each naming the state it left;
- readers of `id > N` never miss an event: on PostgreSQL eight writers at once while a
  reader follows the log, and the reader's pieces add up to the whole log, in order;
- the sweep keeps the newest event, so a resume point it removed is still seen as a gap;
- another replica's writes wake this one's readers (LISTEN/NOTIFY).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from iri_gateway.models.job import JobState
from iri_gateway.service.events.hub import EventHub
from iri_gateway.service.events.log import (
    JOB,
    MEMBER,
    TASK,
    EventLog,
    NewEvent,
    StoredEvent,
    write_events,
)
from iri_gateway.service.events.signal import EventSignal, PostgresListener
from iri_gateway.service.operations.store import JobStore, StateChange
from iri_gateway.service.tasks.records import TaskStore
from tests.conftest import stored_plan

ON_BOTH = pytest.mark.parametrize("database_url", ["sqlite", "postgres"], indirect=True)


def new_job(store: JobStore, owner: str = "alice") -> str:
    return store.create(
        owner=owner,
        resource_id="local",
        spec={"executable": "/bin/true"},
        effective_spec={"executable": "/bin/true"},
        plan=stored_plan(),
        script="#!/bin/sh\ntrue\n",
    ).id


def log_of(store: JobStore) -> EventLog:
    return EventLog(store.engine, store.writing)


def summary(events: list[StoredEvent]) -> list[tuple[Any, ...]]:
    return [(e.kind, e.job_id or e.task_id, e.member, e.previous, e.state) for e in events]


@ON_BOTH
def test_every_change_writes_its_event_in_its_own_transaction(database_url: str) -> None:
    store = JobStore(database_url)
    try:
        events = log_of(store)
        job = new_job(store)
        store.set_native_id(job, "101", "queued by the scheduler")
        store.transition(job, JobState.QUEUED, "still queued")  # no move: no event
        members = [{"name": "worker1", "state": "active"}, {"name": "worker2", "state": "active"}]
        store.transition_many([StateChange(job, JobState.ACTIVE, "running", members=members)])
        members = [
            {"name": "worker1", "state": "completed"},
            {"name": "worker2", "state": "active"},
        ]
        store.transition_many([StateChange(job, JobState.ACTIVE, "running", members=members)])
        with pytest.raises(KeyError):  # a change that fails writes no event
            store.transition("no-such-job", JobState.FAILED, "gone")
        tasks = TaskStore(store)
        task = tasks.create("alice", {"command": "cp", "args": {}}, replica_id="r1")
        assert tasks.move(task.id, to="active", result=None, only_from=("pending",))
        assert not tasks.move(task.id, to="active", result=None, only_from=("pending",))
        tasks.create("alice", {"command": "ls", "args": {}}, replica_id=None, status="completed")

        logged = events.after(0)
        assert summary(logged) == [
            (JOB, job, None, None, "new"),
            (JOB, job, None, "new", "queued"),
            (JOB, job, None, "queued", "active"),
            (MEMBER, job, "worker1", None, "active"),
            (MEMBER, job, "worker2", None, "active"),
            (MEMBER, job, "worker1", "active", "completed"),
            (TASK, task.id, None, None, "pending"),
            (TASK, task.id, None, "pending", "active"),
        ], "a task done at once (a read) makes no event"
        assert [e.id for e in logged] == sorted({e.id for e in logged})
        assert {e.owner for e in logged} == {"alice"}
        assert events.after(logged[2].id, limit=2) == logged[3:5]
        assert events.latest() == logged[-1].id and events.oldest() == logged[0].id
    finally:
        store.close()


@ON_BOTH
def test_a_rolled_back_change_leaves_no_event(database_url: str) -> None:
    store = JobStore(database_url)
    try:
        job = new_job(store)
        before = log_of(store).latest()

        class Boom(Exception):
            pass

        with pytest.raises(Boom), store.writing() as session:
            write_events(
                session, [NewEvent(owner="alice", kind=JOB, state="failed", job_id=job)], 0
            )
            raise Boom
        assert log_of(store).latest() == before
    finally:
        store.close()


@ON_BOTH
def test_readers_following_the_log_miss_nothing_while_eight_write_at_once(
    database_url: str,
) -> None:
    store = JobStore(database_url)
    try:
        events = log_of(store)
        jobs = [new_job(store) for _ in range(8)]
        start = events.latest()
        read: list[int] = []
        done = threading.Event()

        def follow() -> None:
            cursor = start
            while True:
                finished = done.is_set()
                found = events.after(cursor, limit=50)
                read.extend(e.id for e in found)
                cursor = found[-1].id if found else cursor
                if finished and not found:
                    return

        def write(job_id: str) -> None:
            for turn in range(30):
                state = JobState.ACTIVE if turn % 2 else JobState.QUEUED
                store.transition(job_id, state, f"turn {turn}")

        follower = threading.Thread(target=follow)
        follower.start()
        writers = [threading.Thread(target=write, args=(job,)) for job in jobs]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        done.set()
        follower.join()
        everything = [e.id for e in events.after(start, limit=10_000)]
        assert len(everything) == 8 * 30
        assert read == everything, "read piece by piece, the log is the whole log, in order"
    finally:
        store.close()


@ON_BOTH
def test_the_sweep_keeps_the_newest_event(database_url: str) -> None:
    now = [1000.0]
    store = JobStore(database_url, clock=lambda: now[0])
    try:
        events = log_of(store)
        job = new_job(store)
        now[0] = 2000.0
        store.transition(job, JobState.QUEUED, "queued")
        store.transition(job, JobState.ACTIVE, "running")
        newest = events.latest()
        assert events.sweep(older_than=1500.0) == 1
        assert events.sweep(older_than=10_000.0) == 1
        assert events.oldest() == newest == events.latest()
    finally:
        store.close()


@ON_BOTH
def test_the_hub_wakes_at_another_processs_writes(database_url: str) -> None:
    """Two stores on one database stand for two replicas: the hub of the first sees what
    the second writes at once on PostgreSQL (NOTIFY), and within its poll on SQLite (a
    SQLite store has one process; its own writes wake it in-process)."""
    mine, theirs = JobStore(database_url), JobStore(database_url)
    listener = (
        PostgresListener(mine.engine.url, mine.event_signal)
        if mine.engine.dialect.name == "postgresql"
        else None
    )
    poll = 30.0 if listener is not None else 0.5
    hub = EventHub(log_of(mine), mine.event_signal, poll=poll, listener=listener)
    try:
        hub.start()
        time.sleep(0.5)  # the listener is listening
        seen = threading.Event()
        hub.listen(seen.set)
        job = new_job(theirs)
        assert seen.wait(10), "the hub was not woken"
        found = hub.since(0)
        assert found is not None and [e.job_id for e in found[0]] == [job]
    finally:
        hub.stop()
        mine.close()
        theirs.close()


def test_an_idle_signal_wait_returns_after_its_timeout() -> None:
    signal = EventSignal()
    started = time.monotonic()
    assert signal.wait_beyond(signal.count, 0.2) == 0
    assert time.monotonic() - started >= 0.2
