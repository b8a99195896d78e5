"""Long filesystem operations as background tasks: a bounded pool per replica runs them,
their progress and end written to the task (`tasks.TaskStore`).

Why: a `cp` of a large tree or an `extract` of a large archive takes longer than a request
should; the operation's request is checked and resolved first (its refusals are immediate),
then answered with the task `pending`, and one of `workers` threads runs it. The work gets a
`Progress` to call with its counts: at most every `interval` seconds that writes
`{progress: {...}}` to the task and looks whether the task was canceled (by its owner
through any replica, or dropped from the bounds); then `TaskCanceled` is raised inside the
work, which removes what it had written and stops.

Workers are shared fairly between users (`fair_pool`): a free worker takes the oldest task
of the user with the fewest running, and one user runs at most `per_user` tasks at once
(default: one fewer than the workers), so one user's long queue delays another user's first
task by at most the time until one running task ends. Fairness is per replica: a task runs
on the replica that accepted it (its work is that request's), while any replica reads it.

A task whose replica is gone (killed, or its heartbeat stale) is marked failed by the
`sweep` of any live replica, and at every start: never `active` forever.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from iri_gateway.errors import GatewayError
from iri_gateway.service.accounts.fair_pool import FairPool, PoolClosedError
from iri_gateway.service.operations import events
from iri_gateway.service.operations.events import event
from iri_gateway.service.operations.replicas import Replica
from iri_gateway.service.tasks.records import (
    ACTIVE,
    CANCELED,
    COMPLETED,
    FAILED,
    PENDING,
    UNFINISHED,
    TaskRecord,
    TaskStore,
)
from iri_gateway.transport.base import TransportError

log = logging.getLogger(__name__)

PROGRESS_INTERVAL = 0.5
"""Seconds between two progress writes of one task (and its cancel checks)."""
SWEEP_INTERVAL = 1.0
"""Seconds between two looks for tasks of dead replicas (made on reads)."""
STOP_WAIT = 10.0
"""Seconds a stopping gateway waits for its running tasks to stop and clean up."""


class TaskCanceled(Exception):
    """Raised inside a task's work when the task was canceled or the gateway stops."""


class TaskFailedError(GatewayError):
    """The work's refusal, as the problem the synchronous answer would have been."""

    code = "task_failed"

    def __init__(self, problem: dict[str, Any]) -> None:
        super().__init__(str(problem.get("detail") or problem.get("title")))
        self.problem = problem


Work = Callable[["Progress"], dict[str, Any]]
"""What a task does: given its progress reporter, its result (`{output: ...}`)."""


class Progress:
    """Called by the work with its counts; writes them at a bounded rate, and raises
    TaskCanceled once the task is no longer the work's to finish."""

    def __init__(self, runner: TaskRunner, task_id: str, stop: threading.Event) -> None:
        self._runner, self._task_id, self._stop = runner, task_id, stop
        self._last = time.monotonic()
        self.interval = runner.interval
        """Seconds between two writes (a remote writer prints its lines as often)."""

    def __call__(self, counts: dict[str, Any]) -> None:
        if self._stop.is_set():
            raise TaskCanceled
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        shown = {
            key: int(counts[key])
            for key in ("entries_done", "entries_total", "bytes_done", "bytes_total")
            if isinstance(counts.get(key), int)
        }
        if not self._runner.store.move(
            self._task_id, to=ACTIVE, result={"progress": shown}, only_from=(ACTIVE,)
        ):
            raise TaskCanceled


class TaskRunner:
    """This replica's pool of task workers, and its tasks' records."""

    def __init__(
        self,
        store: TaskStore,
        replica: Replica,
        *,
        workers: int,
        interval: float = PROGRESS_INTERVAL,
        per_user: int | None = None,
    ) -> None:
        self.store, self.replica, self.interval = store, replica, interval
        self._workers = workers
        self.per_user = per_user or max(1, workers - 1)
        """Tasks one user runs at once (the others wait as `pending`)."""
        self._pool = FairPool(workers=workers, per_user=self.per_user)
        self._lock = threading.Lock()
        self._running: dict[str, tuple[threading.Event, threading.Event]] = {}
        """Each task this replica has queued or runs: (stop it, it is done)."""
        self._stopping = False
        self._last_sweep = 0.0

    def record(self, owner: str, command: dict[str, Any], result: dict[str, Any]) -> TaskRecord:
        """A finished operation, recorded as `owner`'s completed task."""
        return self.store.create(
            owner, command, replica_id=self.replica.id, status=COMPLETED, result=result
        )

    def submit(
        self, owner: str, command: dict[str, Any], work: Work, *, limit: int | None = None
    ) -> TaskRecord:
        """`work` as `owner`'s new pending task, run by the pool (TaskLimitError when
        `owner` has `limit` unfinished ones; default: the store's bound)."""
        task = self.store.create(owner, command, replica_id=self.replica.id, limit=limit)
        stop, done = threading.Event(), threading.Event()
        with self._lock:
            if self._stopping:
                raise GatewayError("the gateway is stopping; ask again")
            self._running[task.id] = (stop, done)
            try:
                self._pool.submit(owner, task.id, lambda: self._run(task, work, stop))
            except PoolClosedError:
                self._running.pop(task.id, None)
                raise GatewayError("the gateway is stopping; ask again") from None
        return task

    @property
    def unfinished_limit(self) -> int:
        """The unfinished tasks a user may have at once (the gateway's `tasks_per_user`)."""
        return self.store.per_user

    def unfinished(self, owner: str) -> int:
        """How many of `owner`'s tasks are pending or active, over every replica."""
        return self.store.unfinished(owner)

    def get(self, owner: str, task_id: str) -> TaskRecord | None:
        """`owner`'s task (those of replicas that are gone marked failed first)."""
        self.sweep()
        return self.store.get(owner, task_id)

    def list(self, owner: str) -> list[TaskRecord]:
        """`owner`'s tasks, oldest first (those of replicas that are gone marked failed)."""
        self.sweep()
        return self.store.list(owner)

    def delete(self, owner: str, task_id: str) -> str | None:
        """Forget `owner`'s finished task (`"deleted"`), or cancel an unfinished one
        (`"canceled"`: it stops at its next step, at once if this replica runs it); None:
        not `owner`'s task."""
        done = self.store.delete(owner, task_id)
        if done == CANCELED:
            with self._lock:
                running = self._running.get(task_id)
            if running is not None:
                running[0].set()
                if self._pool.withdraw(task_id):  # still waiting: it never runs
                    self.store.finish_canceled(task_id, {"stopped": True})
                    with self._lock:
                        self._running.pop(task_id, None)
                    running[1].set()
        return done

    def _run(self, task: TaskRecord, work: Work, stop: threading.Event) -> None:
        task_id = task.id
        try:
            if stop.is_set() or not self.store.move(
                task_id, to=ACTIVE, result=None, only_from=(PENDING,)
            ):
                self.store.finish_canceled(task_id, {"stopped": True})
                return
            _task_event(task, events.TASK_STARTED, ACTIVE)
            try:
                result = work(Progress(self, task_id, stop))
            except TaskCanceled:
                self._stopped(task)
            except TaskFailedError as failed:
                self._end(task, FAILED, {"error": failed.problem})
            except TransportError as error:
                self._end(
                    task,
                    FAILED,
                    {
                        "error": {
                            "status": 503,
                            "title": "Service Unavailable",
                            "detail": f"{error}; what it had written may be left: "
                            "look, then ask again",
                        }
                    },
                )
            except Exception as error:
                log.exception("task %s failed", task_id)
                self._end(
                    task,
                    FAILED,
                    {
                        "error": {
                            "status": 500,
                            "title": "Internal Server Error",
                            "detail": f"the operation failed: {error}",
                        }
                    },
                )
            else:
                self._end(task, COMPLETED, result)
        except Exception:
            log.exception("task %s could not be recorded", task_id)
        finally:
            with self._lock:
                running = self._running.pop(task_id, None)
            if running is not None:
                running[1].set()

    def _end(self, task: TaskRecord, status: str, result: dict[str, Any]) -> None:
        """The active TASK ended with STATUS and RESULT; if it was canceled meanwhile, it
        says it stopped."""
        if self.store.move(task.id, to=status, result=result, only_from=(ACTIVE,)):
            _task_event(task, events.TASK_ENDED, status)
        else:
            self._stopped(task)

    def _stopped(self, task: TaskRecord) -> None:
        """The work stopped early: a canceled task says it stopped; if the gateway is
        stopping, the task failed saying so."""
        task_id = task.id
        _task_event(task, events.TASK_ENDED, FAILED if self._stopping else CANCELED)
        if self._stopping:
            self.store.move(
                task_id,
                to=FAILED,
                only_from=UNFINISHED,
                result={
                    "error": {
                        "status": 503,
                        "title": "Service Unavailable",
                        "detail": "the gateway stopped while this task ran; what it had "
                        "written was removed: ask again",
                    }
                },
            )
        self.store.finish_canceled(task_id, {"stopped": True})

    def sweep(self, *, force: bool = False) -> int:
        """Mark failed the unfinished tasks of replicas that are gone (at most every
        SWEEP_INTERVAL unless `force`); the number marked."""
        now = time.monotonic()
        if not force and now - self._last_sweep < SWEEP_INTERVAL:
            return 0
        self._last_sweep = now
        failed = self.store.fail_orphans(self.replica.live(), "stopped or died")
        if failed:
            log.warning("%d tasks of gateway processes that are gone marked failed", failed)
        return failed

    def close(self, *, deadline: float | None = None) -> None:
        """Stop the running tasks (they clean up; waited for a while) and mark every
        unfinished one of this replica failed; used again, the runner has a new pool.

        With `deadline` (a `time.monotonic()` time: a draining stop), the tasks queued or
        running now are first given until then to finish: a task's work lives in this
        process (no other replica can carry it on), so what does not end in time is
        stopped, cleans up what it wrote, and is failed with "ask again"."""
        if deadline is not None:
            with self._lock:
                waiting = [done for _stop, done in self._running.values()]
            for done in waiting:
                done.wait(timeout=max(0.0, deadline - time.monotonic()))
        with self._lock:
            self._stopping = True
            running = list(self._running.values())
        for stop, _done in running:
            stop.set()
        for key in self._pool.close():  # never started: marked failed below
            with self._lock:
                dropped = self._running.pop(key, None)
            if dropped is not None:
                dropped[1].set()
        deadline = time.monotonic() + STOP_WAIT
        for _stop, done in running:
            done.wait(timeout=max(0.0, deadline - time.monotonic()))
        try:
            self.store.fail_all_of(
                self.replica.id,
                "the gateway process running this task stopped before it finished: ask again",
            )
        except Exception as error:
            log.warning("unfinished tasks not marked failed (the next start does): %s", error)
        with self._lock:
            self._pool = FairPool(workers=self._workers, per_user=self.per_user)
            self._stopping = False


def _task_event(task: TaskRecord, name: str, status: str) -> None:
    """A `task.started` or `task.ended` line: the task, its owner, its operation, its
    status (never its arguments: paths and patterns the user sent)."""
    operation = task.command.get("command")
    event(
        log,
        name,
        f"task {task.id} ({operation}) of {task.owner}: {status}",
        task=task.id,
        user=task.owner,
        operation=operation,
        status=status,
    )
