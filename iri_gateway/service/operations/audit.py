"""The audit log: who changed what, when, with what outcome, kept in the store.

One row per state-changing call (and per refused attempt at one), written by the API's audit
middleware (`api/plumbing/audit.py`) before the answer leaves, and by the operator's token
commands. Rows are appended only: this module has no update, the database's triggers refuse
one (migration 0009), and the one delete is the retention sweep, which removes rows older
than the retention (the triggers refuse deleting anything younger than a day whatever the
caller). Reads are newest first, filtered by user, operation and time, one page at a time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal, TypedDict, Unpack

from sqlalchemy import Select, delete, insert, select
from sqlalchemy.orm import sessionmaker

from iri_gateway.service.operations.schema import AuditRow
from iri_gateway.service.operations.store import JobStore

log = logging.getLogger(__name__)

Outcome = Literal["succeeded", "refused", "failed"]
DAY = 86400.0
MAX_TARGET = 2048
"""The longest target kept (two paths at their longest fit); a longer one is cut, marked."""


def outcome_of(status: int) -> Outcome:
    """What an HTTP status says happened: below 400 the change was made, 4xx the gateway
    refused it (unauthorised, forbidden, invalid, too many, conflict), 5xx it failed."""
    if status < 400:
        return "succeeded"
    return "refused" if status < 500 else "failed"


def _cut(text: str | None, most: int) -> str | None:
    if text is None or len(text) <= most:
        return text
    return text[: most - 1] + "…"


@dataclass(frozen=True)
class AuditEntry:
    """What one record says: who (`user`, `admin`), what (`operation`, the API's operation
    id or the command's name), on what (`resource_id`, `target`: a job id, path, template
    name or token's user, never a token), the outcome with its HTTP `status` and `error`
    (the problem's title), and the request's and its trace's ids (None outside a request)."""

    user: str
    admin: bool
    operation: str
    outcome: Outcome
    resource_id: str | None = None
    target: str | None = None
    status: int | None = None
    error: str | None = None
    request_id: str | None = None
    trace_id: str | None = None

    def bounded(self) -> dict[str, object]:
        """The entry as column values, each text cut to its column's size."""
        values = asdict(self)
        values["user"] = _cut(self.user, 255)
        values["operation"] = _cut(self.operation, 64)
        values["resource_id"] = _cut(self.resource_id, 63)
        values["target"] = _cut(self.target, MAX_TARGET)
        values["error"] = _cut(self.error, 255)
        return values


@dataclass(frozen=True)
class AuditRecord:
    """A stored entry: its number (ever growing), when it was recorded, and what it says."""

    id: int
    at: float
    entry: AuditEntry


@dataclass(frozen=True)
class AuditPage:
    """One page of records, newest first; `more`: older records match too."""

    records: list[AuditRecord]
    more: bool


class AuditFilters(TypedDict, total=False):
    user: str
    operation: str
    since: float
    """Records at or after this time (seconds since the epoch)."""
    until: float
    """Records before this time."""


def _matching(
    query: Select[tuple[AuditRow]], **filters: Unpack[AuditFilters]
) -> Select[tuple[AuditRow]]:
    if "user" in filters:
        query = query.where(AuditRow.user == filters["user"])
    if "operation" in filters:
        query = query.where(AuditRow.operation == filters["operation"])
    if "since" in filters:
        query = query.where(AuditRow.at >= filters["since"])
    if "until" in filters:
        query = query.where(AuditRow.at < filters["until"])
    return query


def _record(row: AuditRow) -> AuditRecord:
    return AuditRecord(
        id=row.id,
        at=row.at,
        entry=AuditEntry(
            user=row.user,
            admin=row.admin,
            operation=row.operation,
            outcome=row.outcome,  # type: ignore[arg-type]  # only Outcome values are written
            resource_id=row.resource_id,
            target=row.target,
            status=row.status,
            error=row.error,
            request_id=row.request_id,
            trace_id=row.trace_id,
        ),
    )


class AuditLog:
    """The audit table of a store: append, read pages, sweep what is past its retention."""

    def __init__(self, store: JobStore, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._sessions = sessionmaker(store.engine, expire_on_commit=False)
        self._clock = clock

    def record(self, entry: AuditEntry) -> int:
        """Append `entry`, committed before this returns; its record's id."""
        with self._store.writing() as session:
            result = session.execute(
                insert(AuditRow).values(at=self._clock(), **entry.bounded()).returning(AuditRow.id)
            )
            identifier: int = result.scalar_one()
        return identifier

    def page(self, *, offset: int, limit: int, **filters: Unpack[AuditFilters]) -> AuditPage:
        """Records matching `filters`, newest first, skipping `offset`, at most `limit`."""
        query = _matching(select(AuditRow), **filters)
        query = query.order_by(AuditRow.at.desc(), AuditRow.id.desc())
        with self._sessions() as session:
            rows: list[AuditRow] = list(session.scalars(query.offset(offset).limit(limit + 1)))
        return AuditPage([_record(row) for row in rows[:limit]], more=len(rows) > limit)

    def sweep(self, *, retention_days: int) -> int:
        """Delete the records older than `retention_days`; how many went."""
        days = retention_days
        horizon = self._clock() - days * DAY
        with self._store.writing() as session:
            result = session.execute(delete(AuditRow).where(AuditRow.at < horizon))
        swept: int = result.rowcount  # type: ignore[attr-defined]
        if swept:
            log.info(
                "audit retention: %d record(s) older than %d day(s) deleted", swept, retention_days
            )
        return swept


class AuditSweeper:
    """Runs the retention sweep at start and then every `every` seconds until stopped; a
    sweep that fails (the database away) is logged and tried again at the next turn."""

    def __init__(self, audit: AuditLog, *, retention_days: int, every: float) -> None:
        self._audit = audit
        self._retention_days = retention_days
        self._every = every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="audit-sweep", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                self._audit.sweep(retention_days=self._retention_days)
            except Exception:
                log.exception("audit retention sweep failed; trying again in %.0f s", self._every)
            if self._stop.wait(self._every):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
