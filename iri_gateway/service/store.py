"""The job store: every job the gateway accepted, its intent, its script and its history.

SQLAlchemy 2 with SQLite by default (a file in the data directory) or PostgreSQL by URL
(`database.py` opens it; the schema is the Alembic migrations', `migrations/`).
The intent (`desired`: submitted or canceled) is written before the gateway acts, so after a
crash the reconciler knows what was meant and finishes it. Records leave the store as
`JobRecord` values, never as live ORM objects, so no session leaks into callers.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import JSON, Float, Integer, String, Text, UniqueConstraint, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from iri_gateway.errors import GatewayError
from iri_gateway.models.job import JobState
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.models.plan import Plan
from iri_gateway.service.database import open_engine
from iri_gateway.service.migrations import upgrade_schema


class _Base(DeclarativeBase):
    pass


class _JobRow(_Base):
    """A row of `jobs`; the table itself is made and changed by the migrations only (a test
    holds this model and the migrated schema to each other)."""

    __tablename__ = "jobs"
    __table_args__ = (UniqueConstraint("owner", "idempotency_key", name="uq_owner_key"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner: Mapped[str] = mapped_column(String(255), index=True)
    resource_id: Mapped[str] = mapped_column(String(63), index=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_hash: Mapped[str | None] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    effective_spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    plan: Mapped[dict[str, Any]] = mapped_column(JSON)
    script: Mapped[str] = mapped_column(Text)
    native_id: Mapped[str | None] = mapped_column(String(64), index=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    desired: Mapped[str] = mapped_column(String(16))
    exit_code: Mapped[int | None] = mapped_column(Integer)
    message: Mapped[str | None] = mapped_column(Text)
    history: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    # The members of a cluster job (roles), as the engine last read them; [] for other jobs.
    members: Mapped[list[dict[str, Any]]] = mapped_column(
        JSON, default=list, server_default=text("'[]'"))
    submit_attempted_at: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


@dataclass(frozen=True)
class JobRecord:
    """A job as stored: what was asked, what was decided, what happened."""

    id: str
    owner: str
    resource_id: str
    idempotency_key: str | None
    request_hash: str | None
    spec: dict[str, Any]
    effective_spec: dict[str, Any]
    plan: dict[str, Any]
    script: str
    native_id: str | None
    state: JobState
    desired: str
    exit_code: int | None
    message: str | None
    history: list[dict[str, Any]]
    submit_attempted_at: float | None
    created_at: float
    updated_at: float
    members: list[dict[str, Any]] = field(default_factory=list)

    @property
    def tag(self) -> str:
        """The mark put on the scheduler's job so the gateway can find it again."""
        return job_tag(self.id)

    @property
    def plan_model(self) -> StoredPlan:
        """The stored plan as the typed model, its script put back: a field the model has
        lost or renamed fails here (ValidationError), never reads as absent. Validated on
        every access (some 20 µs), so the records the store keeps stay small."""
        return StoredPlan.model_validate({**self.plan, "script": self.script})

    @property
    def spec_model(self) -> JobSpec:
        """The JobSpec as the user sent it, typed (validated on every access)."""
        return JobSpec.model_validate(self.spec)

    @property
    def effective_spec_model(self) -> JobSpec:
        """The JobSpec as it runs (job folder and output paths filled in), typed (validated
        on every access: up to some 100 µs for a large spec; `paths` is cheaper)."""
        return JobSpec.model_validate(self.effective_spec)

    @property
    def paths(self) -> JobPaths:
        """Where the job runs and writes, typed from the effective spec (a few µs: status
        views read it for every job they show)."""
        return JobPaths.model_validate(self.effective_spec)

    @property
    def named_directory(self) -> bool:
        """True when the user named the job's `directory`; otherwise the gateway made the
        job's folder (`<job root>/<job id>`)."""
        return bool(JobPaths.model_validate(self.spec).directory)


class JobPaths(BaseModel):
    """The JobSpec fields that say where a job runs and writes, read back from a stored spec
    without validating all of it; their names and types are JobSpec's (a test holds them
    to it), and any other field of the spec is left aside."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    directory: str | None = None
    stdout_path: str | None = None
    stderr_path: str | None = None


class StoredPlan(Plan):
    """A plan read back from the store: a stored field the model does not have is an error,
    so renaming a field of `Plan` cannot silently drop what records already hold."""

    model_config = ConfigDict(extra="forbid")


def job_tag(job_id: str) -> str:
    return f"iri-gateway:{job_id}"


def _record(row: _JobRow) -> JobRecord:
    return JobRecord(
        id=row.id, owner=row.owner, resource_id=row.resource_id,
        idempotency_key=row.idempotency_key, request_hash=row.request_hash,
        spec=row.spec, effective_spec=row.effective_spec, plan=row.plan, script=row.script,
        native_id=row.native_id, state=JobState(row.state), desired=row.desired,
        exit_code=row.exit_code, message=row.message, history=list(row.history),
        submit_attempted_at=row.submit_attempted_at, created_at=row.created_at,
        updated_at=row.updated_at, members=list(row.members or []),
    )


MAX_SQL_OFFSET = 2**63 - 1
"""The largest OFFSET SQL databases take (a signed 64-bit integer)."""

CACHE_RECORDS = 4096
"""Job records the store keeps in memory (the most recently used): enough for every job a
busy poller and its clients touch, and a bound on memory whatever the number of jobs."""


class _RecentRecords:
    """A least-recently-used map of job records, safe to use from several threads."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._records: OrderedDict[str, JobRecord] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, job_id: str) -> JobRecord | None:
        with self._lock:
            record = self._records.get(job_id)
            if record is not None:
                self._records.move_to_end(job_id)
            return record

    def put(self, record: JobRecord) -> None:
        with self._lock:
            self._records[record.id] = record
            self._records.move_to_end(record.id)
            while len(self._records) > self._capacity:
                self._records.popitem(last=False)

    def __len__(self) -> int:
        return len(self._records)


class JobStore:
    """CRUD and state transitions of job records."""

    def __init__(self, url: str, *, clock: Any = time.time,
                 cache_records: int = CACHE_RECORDS) -> None:
        """Open the database at `url` and bring its schema up to date (DatabaseError, one
        line without the password, when it cannot be used)."""
        self.engine: Engine = open_engine(url)
        upgrade_schema(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._clock = clock
        # Read-through cache of records by id: this process is the store's only writer (the
        # poller runs in it), so every write refreshes the cache and reads by id need no query.
        # Bounded (least recently used first out), so memory does not grow with the jobs.
        # Several gateway processes on one database would break that premise: each would
        # serve its own last-written state (see docs/operations.md, "The store").
        self._cache = _RecentRecords(cache_records)

    def close(self) -> None:
        """Close the pooled database connections; the store opens new ones when used again."""
        self.engine.dispose()

    @contextmanager
    def _session(self) -> Iterator[Session]:
        with self._sessions.begin() as session:
            yield session

    def create(
        self,
        *,
        job_id: str | None = None,
        owner: str,
        resource_id: str,
        spec: dict[str, Any],
        effective_spec: dict[str, Any],
        plan: dict[str, Any],
        script: str,
        idempotency_key: str | None = None,
        request_hash: str | None = None,
        submitting: bool = False,
    ) -> JobRecord:
        """Record a new job with the intent to submit it, before anything is sent.

        `submitting` also records that the submission is being tried now (one commit
        instead of two on the hot path). IdempotencyKeyTakenError, holding the job that has
        it, when another submission recorded the same (owner, key) first: the unique
        constraint decides a race that looking the key up first cannot.
        """
        now = self._clock()
        row = _JobRow(
            id=job_id or str(uuid.uuid4()), owner=owner, resource_id=resource_id,
            idempotency_key=idempotency_key, request_hash=request_hash, spec=spec,
            effective_spec=effective_spec, plan=plan, script=script, native_id=None,
            state=JobState.NEW.value, desired="submitted", exit_code=None,
            message="accepted by the gateway",
            history=[{"state": "new", "time": now, "message": "accepted by the gateway"}],
            members=[], submit_attempted_at=now if submitting else None, created_at=now,
            updated_at=now,
        )
        try:
            with self._session() as session:
                session.add(row)
        except IntegrityError:
            earlier = (self.by_idempotency_key(owner, idempotency_key)
                       if idempotency_key is not None else None)
            if earlier is None:
                raise
            raise IdempotencyKeyTakenError(earlier) from None
        return self._remember(_record(row))

    def get(self, job_id: str) -> JobRecord | None:
        cached = self._cache.get(job_id)
        if cached is not None:
            return cached
        with self._session() as session:
            row = session.get(_JobRow, job_id)
            return self._remember(_record(row)) if row else None

    def _remember(self, record: JobRecord) -> JobRecord:
        self._cache.put(record)
        return record

    def by_idempotency_key(self, owner: str, key: str) -> JobRecord | None:
        with self._session() as session:
            row = session.scalars(
                select(_JobRow).where(_JobRow.owner == owner, _JobRow.idempotency_key == key)
            ).first()
            return _record(row) if row else None

    def find(
        self,
        *,
        owner: str | None = None,
        resource_id: str | None = None,
        states: Sequence[JobState] | None = None,
        name: str | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> list[JobRecord]:
        """Records matching every filter given, oldest first; `name` is the JobSpec's name.

        Filters apply before `offset` and `limit`, so a page holds only matching jobs.
        """
        # SQL's OFFSET has a maximum (a signed 64-bit integer); no store holds that many jobs,
        # so a larger offset is past the end all the same.
        offset = min(offset, MAX_SQL_OFFSET)
        query = select(_JobRow).order_by(_JobRow.created_at, _JobRow.id)
        if owner is not None:
            query = query.where(_JobRow.owner == owner)
        if resource_id is not None:
            query = query.where(_JobRow.resource_id == resource_id)
        if states is not None:
            query = query.where(_JobRow.state.in_([s.value for s in states]))
        if name is not None:
            query = query.where(_JobRow.spec["name"].as_string() == name)
        query = query.offset(offset)
        if limit is not None:
            query = query.limit(limit)
        with self._session() as session:
            return [_record(row) for row in session.scalars(query)]

    def unsettled(self) -> list[JobRecord]:
        """Jobs whose state is not final: the ones the poller and reconciler care about."""
        finals = [s.value for s in JobState if s.final]
        with self._session() as session:
            rows = session.scalars(select(_JobRow).where(_JobRow.state.not_in(finals)))
            return [_record(row) for row in rows]

    def mark_submit_attempt(self, job_id: str) -> JobRecord:
        """Say, before sending, that a submission is being tried now."""
        return self._update(job_id, submit_attempted_at=self._clock())

    def set_native_id(self, job_id: str, native_id: str, message: str) -> JobRecord:
        """The scheduler accepted the job: it is queued from now on."""
        return self._transition(job_id, JobState.QUEUED, message, native_id=native_id)

    def request_cancel(self, job_id: str) -> JobRecord:
        return self._update(job_id, desired="canceled")

    def transition(
        self, job_id: str, state: JobState, message: str, *, exit_code: int | None = None
    ) -> JobRecord:
        """Move to `state` (recorded in the history when it changes)."""
        return self._transition(job_id, state, message, exit_code=exit_code)

    def transition_many(self, changes: Sequence[StateChange]) -> None:
        """Apply a poll cycle's changes in one transaction (one commit, not one per job)."""
        if not changes:
            return
        now = self._clock()
        with self._session() as session:
            rows = {row.id: row for row in session.scalars(
                select(_JobRow).where(_JobRow.id.in_([change.job_id for change in changes]))
            )}
            changed = []
            for change in changes:
                row = rows.get(change.job_id)
                if row is not None:
                    _change(row, change.state, change.message, now,
                            {"exit_code": change.exit_code, "members": change.members})
                    changed.append(row)
        for row in changed:
            self._remember(_record(row))

    def _transition(self, job_id: str, state: JobState, message: str, **fields: Any) -> JobRecord:
        now = self._clock()
        with self._session() as session:
            row = session.get(_JobRow, job_id)
            if row is None:
                raise KeyError(job_id)
            _change(row, state, message, now, fields)
            record = _record(row)
        return self._remember(record)

    def _update(self, job_id: str, **fields: Any) -> JobRecord:
        with self._session() as session:
            row = session.get(_JobRow, job_id)
            if row is None:
                raise KeyError(job_id)
            for key, value in fields.items():
                setattr(row, key, value)
            row.updated_at = self._clock()
            record = _record(row)
        return self._remember(record)

    def withdraw(self, job_id: str, message: str) -> JobRecord:
        """A submission refused before the scheduler saw it, the client told to try again:
        the record ends `failed` and gives up its idempotency key (one commit), so the retry
        with the same key submits afresh instead of replaying this refusal."""
        with self._session() as session:
            row = session.get(_JobRow, job_id)
            if row is None:
                raise KeyError(job_id)
            row.idempotency_key = None
            _change(row, JobState.FAILED, message, self._clock(), {})
            record = _record(row)
        return self._remember(record)


class IdempotencyKeyTakenError(GatewayError):
    """Another submission recorded the same (owner, idempotency key) first: `earlier`."""

    code = "idempotency_key_taken"

    def __init__(self, earlier: JobRecord) -> None:
        self.earlier = earlier
        super().__init__(f"idempotency key {earlier.idempotency_key!r} is held by job "
                         f"{earlier.id}")


@dataclass(frozen=True)
class StateChange:
    """A new state for one job, as a poll cycle found it."""

    job_id: str
    state: JobState
    message: str
    exit_code: int | None = None
    members: list[dict[str, Any]] | None = None  # a cluster job's members, when (re)read


def _change(row: _JobRow, state: JobState, message: str, now: float,
            fields: dict[str, Any]) -> None:
    for key, value in fields.items():
        if value is not None:
            setattr(row, key, value)
    if row.state != state.value or row.message != message:
        row.history = [*row.history, {"state": state.value, "time": now, "message": message}]
    row.state, row.message, row.updated_at = state.value, message, now
