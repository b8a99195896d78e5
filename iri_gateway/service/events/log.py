"""The event log: one row per state change, written in the transaction of the change, read
by id (the streams, the webhook dispatcher) and swept after the retention.

Written with the change, not after it: a process killed between the two would otherwise
keep a change nobody hears of, or announce one that never happened. Ids are seen in the
order they are given out, so a reader that has read up to id N never misses a later
event by reading `id > N`: SQLite has one writer at a time, and on PostgreSQL, where a
sequence's numbers may commit out of order, the writer of events takes a transaction-wide
advisory lock first, so the next writer of events gets its number only after this one
committed. The lock is held from the event's insert to the commit, the last statement of
the change's transaction: the writers of events take turns only for that moment.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import delete, func, insert, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from iri_gateway.service.operations.schema import EventRow

JOB, MEMBER, ELEMENT, TASK = "job", "member", "element", "task"
"""What an event is about: a job, a member of a cluster job, an element of an array job
(its index in `member`), a file task."""

NOTIFY_CHANNEL = "iri_gateway_events"
"""The PostgreSQL channel told of every commit that wrote events (`signal.PostgresListener`)."""

_ORDER_LOCK = 0x1E7E_0001
"""The advisory lock the writers of events take on PostgreSQL (see the module's text)."""

WRITTEN = "iri_gateway.events_written"
"""The key a session's `info` holds when the session wrote events: the store wakes the
readers of this process once it committed (`JobStore.writing`)."""


@dataclass(frozen=True)
class StoredEvent:
    """One row of the log. `state` is the new state; `previous` the one before (None for a
    job's or task's first)."""

    id: int
    at: float
    owner: str
    kind: str
    state: str
    previous: str | None = None
    message: str | None = None
    resource_id: str | None = None
    job_id: str | None = None
    member: str | None = None
    task_id: str | None = None


@dataclass(frozen=True)
class NewEvent:
    """An event to write (its id and time given by the log)."""

    owner: str
    kind: str
    state: str
    previous: str | None = None
    message: str | None = None
    resource_id: str | None = None
    job_id: str | None = None
    member: str | None = None
    task_id: str | None = None


def write_events(session: Session, events: Sequence[NewEvent], now: float) -> None:
    """Insert `events` in `session`'s transaction (see the module's text for the order)."""
    if not events:
        return
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ORDER_LOCK})
        connection.execute(text("SELECT pg_notify(:channel, '')"), {"channel": NOTIFY_CHANNEL})
    connection.execute(insert(EventRow), [{**asdict(event), "at": now} for event in events])
    session.info[WRITTEN] = True


_COLUMNS = (
    EventRow.id,
    EventRow.at,
    EventRow.owner,
    EventRow.kind,
    EventRow.state,
    EventRow.previous,
    EventRow.message,
    EventRow.resource_id,
    EventRow.job_id,
    EventRow.member,
    EventRow.task_id,
)


class EventLog:
    """Reading and sweeping the log of one store's database."""

    def __init__(
        self, engine: Engine, writing: Callable[[], AbstractContextManager[Session]]
    ) -> None:
        """`writing`: the store's session for a write (`JobStore.writing`: on SQLite the
        process's writers take turns)."""
        self._engine = engine
        self._writing = writing

    def after(
        self, event_id: int, *, owner: str | None = None, limit: int = 500
    ) -> list[StoredEvent]:
        """The events after `event_id` (of `owner` only, when given), oldest first, at most
        `limit`."""
        query = select(*_COLUMNS).where(EventRow.id > event_id)
        if owner is not None:
            query = query.where(EventRow.owner == owner)
        query = query.order_by(EventRow.id).limit(limit)
        with self._engine.connect() as connection:
            rows = connection.execute(query).all()
        return [StoredEvent(*row) for row in rows]

    def latest(self) -> int:
        """The newest event's id; 0 when the log is empty."""
        with self._engine.connect() as connection:
            found: Any = connection.scalar(select(func.max(EventRow.id)))
        return int(found or 0)

    def oldest(self) -> int | None:
        """The oldest kept event's id; None when the log is empty."""
        with self._engine.connect() as connection:
            found: Any = connection.scalar(select(func.min(EventRow.id)))
        return int(found) if found is not None else None

    def sweep(self, older_than: float) -> int:
        """Delete the events recorded before `older_than` (unix time), the newest one
        apart; how many. The newest stays so that the log always says where it is: a
        stream resuming from an id the sweep removed is told of its gap (`oldest` is past
        it) even when nothing happened since."""
        newest = select(func.max(EventRow.id)).scalar_subquery()
        with self._writing() as session:
            result = session.execute(
                delete(EventRow).where(EventRow.at < older_than, EventRow.id < newest)
            )
        return int(getattr(result, "rowcount", 0) or 0)
