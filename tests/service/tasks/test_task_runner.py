"""The task runner's endings that the real-serve tests cannot bring about on demand: a
transport fault while a task runs is a retryable 503 in the task (never a 500), and another
bug is a 500 naming it; on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from iri_gateway.service.operations.replicas import Replica
from iri_gateway.service.operations.store import JobStore
from iri_gateway.service.tasks.records import TaskRecord, TaskStore
from iri_gateway.service.tasks.runner import Progress, TaskRunner
from iri_gateway.transport.base import TransportError


def _ended(runner: TaskRunner, task: TaskRecord) -> TaskRecord:
    deadline = time.monotonic() + 30
    while True:
        found = runner.get(task.owner, task.id)
        assert found is not None
        if found.status not in ("pending", "active"):
            return found
        assert time.monotonic() < deadline, f"the task never ended: {found}"
        time.sleep(0.02)


def _runner(url: str) -> TaskRunner:
    store = JobStore(url)
    replica = Replica(store)
    replica.start()
    return TaskRunner(TaskStore(store), replica, workers=2)


def test_a_transport_fault_fails_the_task_with_a_retryable_503(database_url: str) -> None:
    runner = _runner(database_url)

    def work(_progress: Progress) -> dict[str, Any]:
        raise TransportError("the login node login.example does not answer")

    task = _ended(
        runner, runner.submit("alice", {"router": "filesystem", "command": "cp", "args": {}}, work)
    )
    assert task.status == "failed"
    assert task.result is not None
    error = task.result["error"]
    assert error["status"] == 503 and "does not answer" in error["detail"]
    runner.close()
    runner.replica.stop()


def test_a_bug_in_the_work_is_a_500_naming_it(database_url: str) -> None:
    runner = _runner(database_url)

    def work(_progress: Progress) -> dict[str, Any]:
        raise KeyError("rest")

    task = _ended(
        runner, runner.submit("alice", {"router": "filesystem", "command": "cp", "args": {}}, work)
    )
    assert task.status == "failed"
    assert task.result is not None and task.result["error"]["status"] == 500
    assert "rest" in task.result["error"]["detail"]
    runner.close()
    runner.replica.stop()


def test_a_draining_close_lets_tasks_finish_until_the_deadline_then_stops_the_rest(
    tmp_path: Path,
) -> None:
    """close(deadline=...): a task that ends in time completes; one still running at the
    deadline is stopped (TaskCanceled at its next progress call) and failed, "ask again"."""
    runner = _runner(f"sqlite:///{tmp_path}/jobs.db")
    command = {"router": "filesystem", "command": "cp", "args": {}}

    def quick(progress: Progress) -> dict[str, Any]:
        time.sleep(0.3)
        progress({"entries_done": 1})  # a stopped task would stop here
        return {"output": "copied"}

    def endless(progress: Progress) -> dict[str, Any]:
        while True:
            progress({"entries_done": 1})
            time.sleep(0.02)

    finishing = runner.submit("alice", command, quick)
    stuck = runner.submit("bob", command, endless)
    started = time.monotonic()
    runner.close(deadline=time.monotonic() + 1.5)
    assert 1.4 < time.monotonic() - started < 15
    done = runner.store.get("alice", finishing.id)
    assert done is not None and done.status == "completed", done
    cut = runner.store.get("bob", stuck.id)
    assert cut is not None and cut.status == "failed", cut
    assert cut.result is not None and "ask again" in cut.result["error"]["detail"], cut.result
    runner.replica.stop()
