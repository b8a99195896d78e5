"""The filesystem operations' tasks, in the store (`tasks`), so that any replica reads them.

A task belongs to the user who asked for it: another user's task is not found, for reading
and deleting alike. It is `pending` until a worker takes it, `active` while it runs (its
`result` then holds `{progress: ...}`), and ends `completed` (`{output: ...}`), `failed`
(`{error: problem}`) or `canceled`. Every change of status is one conditional update (from
the statuses it may come from), so a cancel and a worker finishing at the same moment leave
one answer, never a mixture.

Bounded per user: at most `per_user` unfinished tasks (one more is refused,
`TaskLimitError`: an unfinished task is never dropped to make room, so a user's quick
operations cannot stop their long copy), and the newest `per_user` finished ones, each for
`ttl` seconds. On PostgreSQL the count and the insert of one user's task hold a lock of
that user's (an advisory transaction lock), so two replicas cannot both take the last place.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import Delete, bindparam, delete, func, insert, or_, select, text, update
from sqlalchemy.orm import sessionmaker

from iri_gateway.service.accounts.quotas import QuotaError
from iri_gateway.service.events.log import TASK, NewEvent, write_events
from iri_gateway.service.operations.schema import TaskRow
from iri_gateway.service.operations.store import JobStore

TASKS_PER_USER = 32
"""Unfinished tasks a user may have at once, and finished ones kept per user (the newest)."""
TASK_TTL = 3600.0
"""Seconds a finished task stays readable."""

PENDING, ACTIVE, COMPLETED, FAILED, CANCELED = (
    "pending",
    "active",
    "completed",
    "failed",
    "canceled",
)
UNFINISHED = (PENDING, ACTIVE)


TASK_QUOTA_RETRY_AFTER = 5
"""Seconds a task refused by `tasks_per_user` is told to wait (`Retry-After`): a suggestion,
a task ends when its work does."""


class TaskLimitError(QuotaError):
    """The user has `per_user` unfinished tasks already (429: wait for one, or cancel one)."""

    code = "task_limit"


def _owner_lock(owner: str) -> int:
    """The PostgreSQL advisory lock key of one user's tasks (a signed 64-bit number)."""
    digest = hashlib.blake2b(f"iri-gateway tasks of {owner}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@dataclass(frozen=True)
class TaskRecord:
    """One task as the store has it."""

    id: str
    owner: str
    status: str
    command: dict[str, Any]
    result: dict[str, Any] | None
    replica_id: str | None
    created_at: float
    updated_at: float


_UNFINISHED_COUNT = (
    select(func.count())
    .select_from(TaskRow)
    .where(TaskRow.owner == bindparam("owner"), TaskRow.status.in_(UNFINISHED))
)


def _task_event(owner: str, task_id: str, status: str, previous: str | None) -> NewEvent:
    """The event of a task's status change (the event log, `service/events`)."""
    return NewEvent(owner=owner, kind=TASK, state=status, previous=previous, task_id=task_id)


def _trim_statement(per_user: int) -> Delete:
    """One statement that drops one user's finished tasks past `ttl` (`:cutoff`) and, of
    the others, all but the newest `per_user`: the bound on what a user's file operations
    leave in the store, kept in the same transaction as the insert."""
    finished = (TaskRow.owner == bindparam("owner"), TaskRow.status.not_in(UNFINISHED))
    beyond_newest = (
        select(TaskRow.id)
        .where(*finished, TaskRow.updated_at >= bindparam("cutoff"))
        .order_by(TaskRow.created_at.desc(), TaskRow.id)
        .offset(per_user)
    )
    return delete(TaskRow).where(
        *finished,
        or_(TaskRow.updated_at < bindparam("cutoff"), TaskRow.id.in_(beyond_newest)),
    )


def _record(row: TaskRow) -> TaskRecord:
    return TaskRecord(
        row.id,
        row.owner,
        row.status,
        dict(row.command),
        None if row.result is None else dict(row.result),
        row.replica_id,
        row.created_at,
        row.updated_at,
    )


class TaskStore:
    """The users' tasks in the database (written in the job store's turns)."""

    def __init__(
        self,
        store: JobStore,
        *,
        clock: Callable[[], float] = time.time,
        per_user: int = TASKS_PER_USER,
        ttl: float = TASK_TTL,
    ) -> None:
        self._sessions = sessionmaker(store.engine, expire_on_commit=False)
        self._writing = store.writing
        self._clock = clock
        self.per_user, self.ttl = per_user, ttl
        self._trim = _trim_statement(per_user)

    def create(
        self,
        owner: str,
        command: dict[str, Any],
        *,
        replica_id: str | None,
        status: str = PENDING,
        result: dict[str, Any] | None = None,
        limit: int | None = None,
    ) -> TaskRecord:
        """A new task of `owner`'s; the oldest finished ones beyond the bound are dropped.
        TaskLimitError when it would be unfinished and `owner` has `limit` (default
        `per_user`: a resource's profile may set its own) of those."""
        limit = self.per_user if limit is None else limit
        now = self._clock()
        record = TaskRecord(
            id=str(uuid.uuid4()),
            owner=owner,
            status=status,
            command=command,
            result=result,
            replica_id=replica_id,
            created_at=now,
            updated_at=now,
        )
        with self._writing() as session:
            # Core statements on the session's connection: a task is written on every
            # file operation (an `ls` records its completed task), and the ORM's unit of
            # work (an identity map, a flush) costs more than the three statements do.
            connection = session.connection()
            if status in UNFINISHED:
                if connection.dialect.name == "postgresql":
                    connection.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": _owner_lock(owner)}
                    )
                unfinished = connection.scalar(_UNFINISHED_COUNT, {"owner": owner}) or 0
                if unfinished >= limit:
                    raise TaskLimitError(
                        f"{owner} has {unfinished} unfinished file tasks (pending or active), "
                        f"the most a user may have at once (tasks_per_user: {limit}): wait "
                        "for one to end, or cancel one (deleteTask), then ask again",
                        limit="tasks_per_user",
                        limit_value=limit,
                        used=unfinished,
                        retry_after=TASK_QUOTA_RETRY_AFTER,
                    )
            connection.execute(insert(TaskRow).values(**asdict(record)))
            connection.execute(self._trim, {"owner": owner, "cutoff": now - self.ttl})
            if status in UNFINISHED:  # a task done at once (a read) is answered, not streamed
                write_events(session, [_task_event(owner, record.id, status, None)], now)
        return record

    def get(self, owner: str, task_id: str) -> TaskRecord | None:
        """`owner`'s task `task_id` (None: another user's, expired or never made)."""
        with self._sessions() as session:
            row = session.get(TaskRow, task_id)
            if row is None or row.owner != owner or self._expired(row):
                return None
            return _record(row)

    def list(self, owner: str) -> list[TaskRecord]:
        """`owner`'s tasks, oldest first."""
        with self._sessions() as session:
            rows = session.scalars(
                select(TaskRow)
                .where(TaskRow.owner == owner)
                .order_by(TaskRow.created_at, TaskRow.id)
            ).all()
            return [_record(row) for row in rows if not self._expired(row)]

    def unfinished(self, owner: str) -> int:
        """How many of `owner`'s tasks are pending or active (what `per_user` bounds)."""
        with self._sessions() as session:
            return int(
                session.scalar(
                    select(func.count())
                    .select_from(TaskRow)
                    .where(TaskRow.owner == owner, TaskRow.status.in_(UNFINISHED))
                )
                or 0
            )

    def _expired(self, row: TaskRow) -> bool:
        return row.status not in UNFINISHED and row.updated_at < self._clock() - self.ttl

    def status(self, task_id: str) -> str | None:
        """The status of `task_id`, whoever's (None: gone)."""
        with self._sessions() as session:
            found: str | None = session.scalar(select(TaskRow.status).where(TaskRow.id == task_id))
            return found

    def move(
        self, task_id: str, *, to: str, result: dict[str, Any] | None, only_from: Collection[str]
    ) -> bool:
        """Set `task_id`'s status and result if it is in one of `only_from` now (True: it
        was; False: it had moved on, was dropped or canceled)."""
        with self._writing() as session:
            found = session.execute(
                select(TaskRow.owner, TaskRow.status)
                .where(TaskRow.id == task_id, TaskRow.status.in_(list(only_from)))
                .with_for_update()
            ).first()
            if found is None:
                return False
            now = self._clock()
            session.execute(
                update(TaskRow)
                .where(TaskRow.id == task_id)
                .values(status=to, result=result, updated_at=now)
            )
            owner, previous = found
            if previous != to:
                write_events(session, [_task_event(owner, task_id, to, previous)], now)
            return True

    def finish_canceled(self, task_id: str, result: dict[str, Any]) -> None:
        """The result of a canceled task once its work has stopped."""
        self.move(task_id, to=CANCELED, result=result, only_from=(CANCELED,))

    def delete(self, owner: str, task_id: str) -> str | None:
        """Forget `owner`'s finished task (`"deleted"`), or cancel an unfinished one
        (`"canceled"`: its work stops at its next step); None: not `owner`'s task."""
        for _attempt in range(3):
            task = self.get(owner, task_id)
            if task is None:
                return None
            if task.status in UNFINISHED:
                if self.move(
                    task_id,
                    to=CANCELED,
                    result={**(task.result or {}), "stopped": False},
                    only_from=UNFINISHED,
                ):
                    return CANCELED
                continue  # it finished meanwhile: forget it
            with self._writing() as session:
                gone = session.execute(
                    delete(TaskRow).where(
                        TaskRow.id == task_id,
                        TaskRow.owner == owner,
                        TaskRow.status.not_in(UNFINISHED),
                    )
                )
                if getattr(gone, "rowcount", 0):
                    return "deleted"
        return None

    def fail_orphans(self, live: Collection[str], reason: str) -> int:
        """Mark failed every unfinished task whose replica is not in `live` (it died, or
        stopped before the task ran): never `active` forever. The number marked."""
        with self._sessions() as session:
            orphans = session.execute(
                select(TaskRow.id, TaskRow.replica_id).where(
                    TaskRow.status.in_(list(UNFINISHED)), TaskRow.replica_id.not_in(list(live))
                )
            ).all()
        failed = 0
        for task_id, replica_id in orphans:
            failed += self.move(
                task_id,
                to=FAILED,
                only_from=UNFINISHED,
                result={
                    "error": {
                        "status": 503,
                        "title": "Service Unavailable",
                        "detail": f"the gateway process that ran this task (replica "
                        f"{replica_id}) {reason} before it finished; nothing is at the "
                        "target's name; a half-made result may be left beside it under a "
                        "hidden `.iri-work-` name, which the next cp, compress or extract "
                        "into that folder removes: ask again",
                    }
                },
            )
        return failed

    def fail_all_of(self, replica_id: str, reason: str) -> None:
        """Mark failed this replica's unfinished tasks (it is stopping)."""
        with self._writing() as session:
            now = self._clock()
            failing = session.execute(
                select(TaskRow.id, TaskRow.owner, TaskRow.status)
                .where(TaskRow.replica_id == replica_id, TaskRow.status.in_(list(UNFINISHED)))
                .with_for_update()
            ).all()
            write_events(
                session,
                [_task_event(owner, task_id, FAILED, was) for task_id, owner, was in failing],
                now,
            )
            session.execute(
                update(TaskRow)
                .where(TaskRow.id.in_([task_id for task_id, _owner, _was in failing]))
                .values(
                    status=FAILED,
                    updated_at=now,
                    result={
                        "error": {"status": 503, "title": "Service Unavailable", "detail": reason}
                    },
                )
            )
