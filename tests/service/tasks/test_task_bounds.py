"""How many tasks a user keeps, on SQLite and PostgreSQL: a user's quick operations (each
recorded as a finished task) never push out their own long copy still running, finished
tasks are kept newest first up to the bound, and one unfinished task beyond the bound is
refused (`TaskLimitError`), exactly at the bound even when replicas race for the last place.
"""

from __future__ import annotations

import threading

import pytest

from iri_gateway.service.operations.store import JobStore
from iri_gateway.service.tasks.records import COMPLETED, PENDING, TaskLimitError, TaskStore

CP = {"router": "filesystem", "command": "cp", "args": {}}
MKDIR = {"router": "filesystem", "command": "mkdir", "args": {}}


def test_quick_operations_never_push_out_a_running_task(database_url: str) -> None:
    tasks = TaskStore(JobStore(database_url), per_user=4)
    running = tasks.create("alice", CP, replica_id="r1")
    done = [
        tasks.create("alice", MKDIR, replica_id="r1", status=COMPLETED, result={"output": index})
        for index in range(10)
    ]
    kept = tasks.list("alice")
    assert [task.id for task in kept] == [running.id] + [task.id for task in done[-4:]]
    assert tasks.get("alice", running.id) is not None
    assert tasks.get("alice", done[0].id) is None


def test_one_unfinished_task_beyond_the_bound_is_refused(database_url: str) -> None:
    tasks = TaskStore(JobStore(database_url), per_user=3)
    first, *_ = [tasks.create("alice", CP, replica_id="r1") for _ in range(3)]
    with pytest.raises(TaskLimitError, match="alice has 3 unfinished file tasks"):
        tasks.create("alice", CP, replica_id="r1")
    assert len(tasks.list("alice")) == 3
    # Another user is not bound by alice's tasks; alice's finished records still go in.
    assert tasks.create("bob", CP, replica_id="r1").status == PENDING
    assert tasks.create("alice", MKDIR, replica_id="r1", status=COMPLETED, result={}).status
    # One ending (here: cancelled) makes room.
    assert tasks.delete("alice", first.id) == "canceled"
    assert tasks.create("alice", CP, replica_id="r1").status == PENDING


def test_racing_creators_fill_exactly_the_bound(database_url: str) -> None:
    """16 threads asking at once: on PostgreSQL each through a store of its own (as replicas
    would), on SQLite through the one store of the process (the only way it is used)."""
    shared = JobStore(database_url)
    postgres = database_url.startswith("postgresql")
    stores = [
        TaskStore(JobStore(database_url) if postgres else shared, per_user=5) for _ in range(16)
    ]
    start = threading.Barrier(len(stores))
    outcomes: list[str] = []

    def create(tasks: TaskStore) -> None:
        start.wait()
        try:
            tasks.create("alice", CP, replica_id="r1")
            outcomes.append("created")
        except TaskLimitError:
            outcomes.append("refused")

    threads = [threading.Thread(target=create, args=(tasks,)) for tasks in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == ["created"] * 5 + ["refused"] * 11
    assert len(stores[0].list("alice")) == 5
