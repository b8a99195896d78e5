"""The job store: every job the gateway accepted, its intent, its script and its history.

SQLAlchemy 2 with SQLite by default (a file in the data directory) or PostgreSQL by URL
(`database.py` opens it; the schema is the Alembic migrations', `migrations/`).
The intent (`desired`: submitted or canceled) is written before the gateway acts, so after a
crash the reconciler knows what was meant and finishes it. Records leave the store as
`JobRecord` values, never as live ORM objects, so no session leaks into callers.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Required, TypedDict, TypeVar, Unpack

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Select, Text, bindparam, cast, func, insert, or_, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from iri_gateway.errors import GatewayError
from iri_gateway.models.array_elements import ArrayElements
from iri_gateway.models.job import JobState
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.models.plan import Plan
from iri_gateway.service.events.log import ELEMENT, JOB, MEMBER, WRITTEN, NewEvent, write_events
from iri_gateway.service.events.signal import EventSignal
from iri_gateway.service.operations import events
from iri_gateway.service.operations.database import (
    DEFAULT_POOL_SIZE,
    is_sqlite,
    json_loads,
    open_engine,
)
from iri_gateway.service.operations.events import event, job_fields
from iri_gateway.service.operations.group_commit import GroupCommit
from iri_gateway.service.operations.migrations import upgrade_schema
from iri_gateway.service.operations.schema import JobRow, UpdateKeyRow

log = logging.getLogger(__name__)
_Row = TypeVar("_Row")


JSON_FIELDS = ("spec", "effective_spec", "plan", "history", "members", "elements")
"""The record's fields stored as JSON (`StoredJson`)."""


class StoredJson:
    """A record's JSON columns, each decoded on first use: a read that shows a few fields
    (a status view needs neither the spec nor, mostly, the whole plan) does not pay for the
    others. A value is given decoded (a dict or list) or as the JSON text read from the
    database (a str: no stored document is a JSON string, they are all objects or arrays).
    Decoding twice from two threads is harmless (the same value)."""

    __slots__ = ("_texts", "_values")

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values
        self._texts = {name: value for name, value in values.items() if isinstance(value, str)}

    def text(self, name: str) -> str | None:
        """The JSON text read from the database for `name` (None: given decoded): what a
        cache of documents made from it compares, exactly, without decoding it."""
        return self._texts.get(name)

    def get(self, name: str) -> Any:
        value = self._values[name]
        if isinstance(value, str | bytes):
            # "[]": the members (elements) of every job that is not a cluster job (an
            # array), and no decoding
            value = [] if value == "[]" else json_loads(value)
            self._values[name] = value
        return value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StoredJson):
            return NotImplemented
        return all(self.get(name) == other.get(name) for name in JSON_FIELDS)

    __hash__ = None  # type: ignore[assignment]  # the documents are dicts: unhashable


@dataclass(frozen=True)
class JobRecord:
    """A job as stored: what was asked, what was decided, what happened (its JSON
    documents, `spec` ... `members`, decoded on first use: `StoredJson`)."""

    id: str
    owner: str
    resource_id: str
    idempotency_key: str | None
    request_hash: str | None
    stored: StoredJson = field(repr=False)
    script: str
    native_id: str | None
    state: JobState
    desired: str
    exit_code: int | None
    message: str | None
    submit_attempted_at: float | None
    created_at: float
    updated_at: float
    claimed_by: str | None = None
    """The replica sending the job to the scheduler now, if any (see `JobStore.claim`)."""
    cancel_sent: bool = False
    """The scheduler has answered the recorded cancel."""
    account: str | None = None
    """The login account that runs the job ('' the gateway's own; None: recorded before
    accounts were, found by the owner's name: `Backends.job_account`)."""

    @property
    def spec(self) -> dict[str, Any]:
        """The JobSpec as the user sent it (its JSON document)."""
        spec: dict[str, Any] = self.stored.get("spec")
        return spec

    @property
    def effective_spec(self) -> dict[str, Any]:
        """The JobSpec as it runs: job folder and output paths filled in."""
        spec: dict[str, Any] = self.stored.get("effective_spec")
        return spec

    @property
    def plan(self) -> dict[str, Any]:
        """The plan as stored, without its script (`script`)."""
        plan: dict[str, Any] = self.stored.get("plan")
        return plan

    @property
    def history(self) -> list[dict[str, Any]]:
        """Every state the job went through: state, time, message."""
        history: list[dict[str, Any]] = self.stored.get("history")
        return history

    @property
    def members(self) -> list[dict[str, Any]]:
        """A cluster job's members, as its script listed them ([] for any other job)."""
        members: list[dict[str, Any]] = self.stored.get("members")
        return members

    @property
    def elements(self) -> list[list[Any]]:
        """An array job's elements as runs (`ArrayElements.dump`), as the engine last read
        them ([] for any other job, and for an array before its first poll)."""
        elements: list[list[Any]] = self.stored.get("elements")
        return elements

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
    def cluster_size(self) -> int | None:
        """The members of a cluster job (None for any other job), read from the stored plan
        without validating all of it: the poller asks for every job it polls."""
        cluster = _PlanCluster.model_validate(self.plan).cluster
        return None if cluster is None else cluster.size

    @property
    def cluster_ports(self) -> dict[str, dict[str, int]]:
        """A cluster job's members' named ports (member -> name -> port), from its plan."""
        cluster = _PlanCluster.model_validate(self.plan).cluster
        return {} if cluster is None else dict(cluster.ports)

    @property
    def named_directory(self) -> bool:
        """True when the user named the job's `directory`; otherwise the gateway made the
        job's folder (`<job root>/<job id>`)."""
        return bool(JobPaths.model_validate(self.spec).directory)


@dataclass(frozen=True, slots=True)
class PollEntry:
    """What a poll cycle and the reconcile read of an unsettled job (`JobStore.poll_entries`):
    a few columns, no spec, plan, script, history or members, so that looking at a job
    that did not change costs next to nothing. Named as `JobRecord`'s fields."""

    id: str
    owner: str
    resource_id: str
    native_id: str | None
    state: JobState
    desired: str
    message: str | None
    cancel_sent: bool
    created_at: float
    updated_at: float
    cluster_size: int | None
    """A cluster job's member count (`JobRecord.cluster_size`); None for any other job."""
    array_size: int | None = None
    """An array job's element count (`Plan.array.count`); None for any other job."""
    account: str | None = None
    """The login account that runs the job (`JobRecord.account`)."""


class JobPaths(BaseModel):
    """The JobSpec fields that say where a job runs and writes, read back from a stored spec
    without validating all of it; their names and types are JobSpec's (a test holds them
    to it), and any other field of the spec is left aside."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    directory: str | None = None
    stdout_path: str | None = None
    stderr_path: str | None = None


class _ClusterSize(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    size: int
    ports: dict[str, dict[str, int]] = {}


class _PlanCluster(BaseModel):
    """The one field of a stored plan the poller needs (`Plan.cluster`'s size); a test holds
    the name and type to `Plan`'s."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    cluster: _ClusterSize | None = None


class StoredPlan(Plan):
    """A plan read back from the store: a stored field the model does not have is an error,
    so renaming a field of `Plan` cannot silently drop what records already hold."""

    model_config = ConfigDict(extra="forbid")


def job_tag(job_id: str) -> str:
    return f"iri-gateway:{job_id}"


_JOBS = JobRow.metadata.tables["jobs"]
_COLUMNS = [
    cast(column, Text).label(column.name) if column.name in JSON_FIELDS else column
    for column in _JOBS.columns
]
"""Every column of the jobs table, for the hot reads (`get`, `find`): SQLAlchemy Core, rows
as tuples, no ORM session, identity map or JobRow objects to build and throw away; the JSON
columns as their text (`StoredJson` decodes what is used)."""


_SELECT = select(*_COLUMNS)
"""Every column: the start of `find`'s query (built once: building a SELECT of 21 columns
costs more than running it)."""
_GET = _SELECT.where(_JOBS.c.id == bindparam("job_id"))
"""`get`'s query, the same statement every time."""
_NAMES = tuple(column.name for column in _JOBS.columns)
"""The jobs table's column names, in `_COLUMNS`' order (also JobRow's attribute names)."""


def _record(row: JobRow) -> JobRecord:
    """The record of an ORM row (the writes)."""
    return _record_of({name: getattr(row, name) for name in _NAMES})


def _record_of(columns: dict[str, Any]) -> JobRecord:
    """The record of a row's columns by name (the JSON ones decoded or as text)."""
    return JobRecord(
        id=columns["id"],
        owner=columns["owner"],
        resource_id=columns["resource_id"],
        idempotency_key=columns["idempotency_key"],
        request_hash=columns["request_hash"],
        stored=StoredJson(
            {
                "spec": columns["spec"],
                "effective_spec": columns["effective_spec"],
                "plan": columns["plan"],
                "history": columns["history"],
                "members": columns["members"] or [],
                "elements": columns.get("elements") or [],
            }
        ),
        script=columns["script"],
        native_id=columns["native_id"],
        state=JobState(columns["state"]),
        desired=columns["desired"],
        exit_code=columns["exit_code"],
        message=columns["message"],
        submit_attempted_at=columns["submit_attempted_at"],
        created_at=columns["created_at"],
        updated_at=columns["updated_at"],
        claimed_by=columns["claimed_by"],
        cancel_sent=bool(columns["cancel_sent"]),
        account=columns.get("account"),
    )


def _read(values: Any) -> JobRecord:
    """The record of a Core row of `_COLUMNS` (read by position: no lookups by name)."""
    return _record_of(dict(zip(_NAMES, values, strict=True)))


MAX_SQL_OFFSET = 2**63 - 1
"""The largest OFFSET SQL databases take (a signed 64-bit integer)."""

CACHE_RECORDS = 4096
"""Job records the store keeps in memory (the most recently used): enough for every job a
busy poller and its clients touch, and a bound on memory whatever the number of jobs."""


class _RecentRecords:
    """A least-recently-used map of job records, safe to use from several threads, that a
    read never makes stale.

    A reader that found nothing here reads the database and offers what it read
    (`offer`); a writer puts its record once committed (`written`). Between the two a
    writer may have committed a newer row: the reader's row, read before that commit, must
    not replace it (it would stay, the job shown in its old state until its next change).
    So every write gets a stamp from one counter, the newest stamps are kept per job, and
    a read is kept only when no write to its job came after the read began (`reading`).
    A job whose stamp was dropped from the bounded map counts as written at the newest
    stamp dropped, which costs at most a read not kept."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._records: OrderedDict[str, JobRecord] = OrderedDict()
        self._lock = threading.Lock()
        self._stamp = 0
        self._stamps: OrderedDict[str, int] = OrderedDict()
        """The stamp of each job's last write, the newest `4 * capacity` jobs."""
        self._dropped = 0
        """Every write not in `_stamps` has a stamp at most this."""

    def get(self, job_id: str) -> JobRecord | None:
        if not self._capacity:
            return None
        with self._lock:
            record = self._records.get(job_id)
            if record is not None:
                self._records.move_to_end(job_id)
            return record

    def reading(self) -> int:
        """The stamp to give `offer` with what is read from the database from now on."""
        with self._lock:
            return self._stamp

    def offer(self, record: JobRecord, since: int) -> None:
        """Keep `record`, read from the database after `reading` answered `since`, unless its
        job was written since (the write's record is newer) or a record of it is here."""
        if not self._capacity:
            return
        with self._lock:
            if self._stamps.get(record.id, self._dropped) > since or record.id in self._records:
                return
            self._keep(record)

    def written(self, job_id: str, record: JobRecord | None) -> None:
        """A write of `job_id` was committed: `record` is the job as written (None: not
        known, the job is read again when next asked for). Called in commit order."""
        if not self._capacity:
            return
        with self._lock:
            self._stamp += 1
            self._stamps[job_id] = self._stamp
            self._stamps.move_to_end(job_id)
            while len(self._stamps) > 4 * self._capacity:
                self._dropped = self._stamps.popitem(last=False)[1]
            if record is None:
                self._records.pop(job_id, None)
            else:
                self._keep(record)

    def written_all(self) -> None:
        """A write of any number of jobs was committed: every record is read again."""
        with self._lock:
            self._stamp += 1
            self._dropped = self._stamp
            self._stamps.clear()
            self._records.clear()

    def _keep(self, record: JobRecord) -> None:
        self._records[record.id] = record
        self._records.move_to_end(record.id)
        while len(self._records) > self._capacity:
            self._records.popitem(last=False)

    def __len__(self) -> int:
        return len(self._records)


class JobFilters(TypedDict, total=False):
    """Which jobs `JobStore.find` and `JobStore.count` take (each given one must hold; None
    or absent: no filter): one signature for both, so a page and its total cannot be asked
    with different filters by mistake."""

    owner: str | None
    resource_id: str | None
    states: Sequence[JobState] | None
    name: str | None
    """The JobSpec's name, exactly."""
    text: str | None
    """A part of the JobSpec's name or of the job id, any case."""


_CACHE_WRITES = "iri_gateway.cache_writes"
"""The session's `info` key of the jobs its commit writes (`JobStore._on_commit`)."""


class NewJob(TypedDict, total=False):
    """A job to record (`JobStore.create`'s arguments, each of `create_many`'s jobs):
    `submitting` also records that its submission is being tried now, `claimed_by` the
    replica about to send it; `job_id` is made when not given."""

    job_id: str
    owner: Required[str]
    resource_id: Required[str]
    spec: Required[dict[str, Any]]
    effective_spec: Required[dict[str, Any]]
    plan: Required[dict[str, Any]]
    script: Required[str]
    idempotency_key: str | None
    request_hash: str | None
    submitting: bool
    claimed_by: str | None
    account: str


class JobStore:
    """CRUD and state transitions of job records."""

    def __init__(
        self,
        url: str,
        *,
        clock: Any = time.time,
        cache_records: int | None = None,
        pool_size: int = DEFAULT_POOL_SIZE,
    ) -> None:
        """Open the database at `url` and bring its schema up to date (DatabaseError, one
        line without the password, when it cannot be used).

        `cache_records`: how many records to keep in memory; by default `CACHE_RECORDS` on
        SQLite and none on any other database (see below)."""
        self.engine: Engine = open_engine(url, pool_size=pool_size)
        upgrade_schema(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._clock = clock
        # Read-through cache of records by id, for SQLite only: a SQLite store has one
        # gateway process (`replicas.Replica` refuses a second), which writes every change
        # through this store, so the cache is never stale and reads by id need no query.
        # On a shared database (PostgreSQL, several replicas) another process changes
        # records behind this one's back, so every read goes to the database: a job the
        # poller of another replica updated is seen at once. Bounded (least recently used
        # first out), so memory does not grow with the jobs.
        sqlite = is_sqlite(self.engine.url)
        if cache_records is None:
            cache_records = CACHE_RECORDS if sqlite else 0
        self._write_lock = threading.Lock() if sqlite else None
        self._cache = _RecentRecords(cache_records)
        self._native_ids = GroupCommit(self._set_native_ids)
        self.event_signal = EventSignal()
        """Woken after every commit of this process that wrote events (`service/events`)."""

    def close(self) -> None:
        """Close the pooled database connections; the store opens new ones when used again."""
        self.engine.dispose()

    @contextmanager
    def _session(self) -> Iterator[Session]:
        with self._sessions.begin() as session:
            yield session

    @contextmanager
    def writing(self) -> Iterator[Session]:
        """A session for a write, committed at the end: every writer of this database in
        this process (the job store, the replica's heartbeat and leases, the templates)
        takes one.

        On SQLite this process's writers take turns on a lock of their own: SQLite lets one
        writer in at a time and makes the others retry with growing sleeps (up to 100 ms
        each; measured: 16 threads writing, p99 460 ms), while a lock hands the turn over at
        once. A writer outside the turn (once: the heartbeat) could hold SQLite's lock while
        its thread waits for the interpreter behind a hundred busy ones, and a job write
        past SQLite's busy time-out failed with "database is locked". PostgreSQL writes rows
        concurrently."""
        if self._write_lock is None:
            with self._session() as session:
                yield session
            self._committed(session)
        else:
            with self._write_lock:
                with self._session() as session:
                    yield session
                self._committed(session)  # in commit order: the newest record is kept
        if session.info.get(WRITTEN):  # committed: the readers of the event log look again
            self.event_signal.wake()

    def _committed(self, session: Session) -> None:
        """What a committed write changed, told to the cache before the event log's
        readers wake: a stream renders an event with the job as getJob shows it, which must
        be the state the event records, not the one before."""
        for job_id, record in session.info.get(_CACHE_WRITES, ()):
            if job_id is None:
                self._cache.written_all()
            else:
                self._cache.written(job_id, record)

    @staticmethod
    def _on_commit(session: Session, job_id: str | None, record: JobRecord | None) -> None:
        """Tell the cache, once `session` commits, that `job_id` was written (`record` as it
        is now, None: read it again), or every job (`job_id` None). Nothing on a rollback."""
        session.info.setdefault(_CACHE_WRITES, []).append((job_id, record))

    def create(self, **job: Unpack[NewJob]) -> JobRecord:
        """Record a new job with the intent to submit it, before anything is sent.

        `submitting` also records that the submission is being tried now (one commit
        instead of two on the hot path). IdempotencyKeyTakenError, holding the job that has
        it, when another submission recorded the same (owner, key) first: the unique
        constraint decides a race that looking the key up first cannot. `claimed_by`: the
        replica that is about to send it (see `claim`).
        """
        now = self._clock()
        columns = _job_columns(now, job)
        owner, idempotency_key = columns["owner"], columns["idempotency_key"]
        try:
            with self.writing() as session:
                # A Core insert: the ORM's unit of work (a JobRow to track and flush) cost
                # more than the insert itself, on the launch's path.
                session.execute(insert(_JOBS).values(columns))
                write_events(session, [_created_event(columns)], now)
                record = _record_of(columns)
                self._on_commit(session, record.id, record)
        except IntegrityError:
            earlier = (
                self.by_idempotency_key(owner, idempotency_key)
                if idempotency_key is not None
                else None
            )
            if earlier is None:
                raise
            raise IdempotencyKeyTakenError(earlier) from None
        return record

    def create_many(self, jobs: Sequence[NewJob]) -> list[tuple[JobRecord, bool]]:
        """Record several new jobs in one transaction, as `create` records one: each entry
        holds `create`'s keyword arguments. The answer, in order: each
        job's new record and True, or, when another submission recorded the same (owner,
        idempotency key) first, the job that holds it and False.

        One commit for all (a bulk launch of a thousand jobs is not a thousand commits). The
        unique (owner, key) constraint still decides a race: when it refuses the insert, the
        transaction is rolled back, the keys found taken are answered with their jobs, and
        the others are inserted again, together; an integrity error that no taken key
        explains is raised."""
        now = self._clock()
        rows = [_job_columns(now, job) for job in jobs]
        taken: dict[int, JobRecord] = {}
        made: dict[int, JobRecord] = {}
        while True:
            pending = [row for index, row in enumerate(rows) if index not in taken]
            try:
                with self.writing() as session:
                    if pending:
                        session.execute(insert(_JOBS), pending)
                        write_events(session, [_created_event(row) for row in pending], now)
                    made = {
                        index: _record_of(row)
                        for index, row in enumerate(rows)
                        if index not in taken
                    }
                    for record in made.values():
                        self._on_commit(session, record.id, record)
                break
            except IntegrityError:
                held = self.by_idempotency_keys(
                    {row["owner"] for row in pending},
                    [row["idempotency_key"] for row in pending if row["idempotency_key"]],
                )
                found = {
                    index: held[(row["owner"], row["idempotency_key"])]
                    for index, row in enumerate(rows)
                    if index not in taken and (row["owner"], row["idempotency_key"]) in held
                }
                if not found:
                    raise
                taken.update(found)
        return [
            (taken[index], False) if index in taken else (made[index], True)
            for index in range(len(rows))
        ]

    def by_idempotency_keys(
        self, owners: Collection[str], keys: Sequence[str]
    ) -> dict[tuple[str, str], JobRecord]:
        """The jobs holding any of `keys` for any of `owners`, by (owner, key); one query per
        thousand keys (a bulk launch looks up all of its keys at once)."""
        found: dict[tuple[str, str], JobRecord] = {}
        for start in range(0, len(keys), 1000):
            chunk = list(keys[start : start + 1000])
            query = _SELECT.where(
                _JOBS.c.owner.in_(list(owners)), _JOBS.c.idempotency_key.in_(chunk)
            )
            with self.engine.connect() as connection:
                for row in connection.execute(query):
                    record = _read(row)
                    if record.idempotency_key is not None:
                        found[(record.owner, record.idempotency_key)] = record
        return found

    def get(self, job_id: str) -> JobRecord | None:
        cached = self._cache.get(job_id)
        if cached is not None:
            return cached
        since = self._cache.reading()
        with self.engine.connect() as connection:
            row = connection.execute(_GET, {"job_id": job_id}).first()
        if row is None:
            return None
        record = _read(row)
        self._cache.offer(record, since)
        return record

    def cached(self, job_id: str) -> JobRecord | None:
        """The record if this store holds it in memory (SQLite only), without any I/O."""
        return self._cache.get(job_id)

    def by_idempotency_key(self, owner: str, key: str) -> JobRecord | None:
        with self._session() as session:
            row = session.scalars(
                select(JobRow).where(JobRow.owner == owner, JobRow.idempotency_key == key)
            ).first()
            return _record(row) if row else None

    def update_key(self, owner: str, key: str) -> str | None:
        """The request digest an update of `owner` recorded with `key`, or None."""
        with self._session() as session:
            row = session.get(UpdateKeyRow, (owner, key))
            return row.request_hash if row else None

    def claim_update_key(self, owner: str, key: str, job_id: str, request_hash: str) -> str | None:
        """Record that `owner`'s update of `job_id` came with `key`: None when recorded now,
        else the digest recorded by the request that had the key first (the primary key
        decides a race that looking the key up first cannot)."""
        row = UpdateKeyRow(
            owner=owner, key=key, job_id=job_id, request_hash=request_hash, created_at=self._clock()
        )
        try:
            with self.writing() as session:
                session.add(row)
        except IntegrityError:
            earlier = self.update_key(owner, key)
            if earlier is None:
                raise
            return earlier
        return None

    def find(
        self,
        *,
        newest_first: bool = False,
        offset: int = 0,
        limit: int | None = None,
        **filters: Unpack[JobFilters],
    ) -> list[JobRecord]:
        """Records matching every filter given (`JobFilters`), oldest first (newest first
        with `newest_first`).

        Filters apply before `offset` and `limit`, so a page holds only matching jobs.
        """
        # SQL's OFFSET has a maximum (a signed 64-bit integer); no store holds that many jobs,
        # so a larger offset is past the end all the same.
        offset = min(offset, MAX_SQL_OFFSET)
        order = (
            (JobRow.created_at.desc(), JobRow.id.desc())
            if newest_first
            else (JobRow.created_at, JobRow.id)
        )
        query = _matching(_SELECT, **filters).order_by(*order).offset(offset)
        if limit is not None:
            query = query.limit(limit)
        with self.engine.connect() as connection:
            return [_read(row) for row in connection.execute(query).all()]

    def count(self, **filters: Unpack[JobFilters]) -> int:
        """How many records `find` would return with the same filters and no paging: the
        total a paged list shows ("1-50 of 1,000") without loading every record."""
        query = _matching(select(func.count()).select_from(_JOBS), **filters)
        with self.engine.connect() as connection:
            return int(connection.scalar(query) or 0)

    def unsettled(self, resource_ids: Sequence[str] | None = None) -> list[JobRecord]:
        """Jobs whose state is not final (on the resources `resource_ids`, when given): the
        ones the poller and reconciler care about."""
        finals = [s.value for s in JobState if s.final]
        query = select(JobRow).where(JobRow.state.not_in(finals))
        if resource_ids is not None:
            query = query.where(JobRow.resource_id.in_(list(resource_ids)))
        with self._session() as session:
            return [_record(row) for row in session.scalars(query)]

    def poll_entries(self, resource_ids: Sequence[str] | None = None) -> list[PollEntry]:
        """What a poll cycle needs of every unsettled job (on `resource_ids`, when given):
        a few columns as `PollEntry` values, in one query, without reading or decoding the
        spec, plan, script, history or members of any job. A cycle's cost then follows the
        jobs that changed (their full records are read, `records`), not the queue: with
        10,000 jobs waiting, `unsettled` spent the poller's whole cycle decoding them.

        A cluster job's size and an array's come from its stored plan by JSON paths the
        database evaluates (`Plan.cluster.size`, `Plan.array.count`); no other part of the
        plan is looked at. The jobs
        are picked by the states that are not final (`IN`, not `NOT IN` the final ones), so
        the index on `state` finds them without reading the settled rows, which are most."""
        waiting = [s.value for s in JobState if not s.final]
        query = select(
            JobRow.id,
            JobRow.owner,
            JobRow.resource_id,
            JobRow.native_id,
            JobRow.state,
            JobRow.desired,
            JobRow.message,
            JobRow.cancel_sent,
            JobRow.created_at,
            JobRow.updated_at,
            JobRow.plan[("cluster", "size")].as_integer(),
            JobRow.plan[("array", "count")].as_integer(),
            JobRow.account,
        ).where(JobRow.state.in_(waiting))
        if resource_ids is not None:
            query = query.where(JobRow.resource_id.in_(list(resource_ids)))
        states = {s.value: s for s in JobState}
        with self._session() as session:
            return [
                PollEntry(
                    id,
                    owner,
                    resource_id,
                    native_id,
                    states[state],
                    desired,
                    message,
                    bool(cancel_sent),
                    created_at,
                    updated_at,
                    cluster_size,
                    array_size,
                    account,
                )
                for (
                    id,
                    owner,
                    resource_id,
                    native_id,
                    state,
                    desired,
                    message,
                    cancel_sent,
                    created_at,
                    updated_at,
                    cluster_size,
                    array_size,
                    account,
                ) in session.execute(query)
            ]

    def records(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        """The full records of `job_ids` that exist, by id, in one query (those this store
        holds in memory without any): for the few jobs of a poll cycle that need more than
        their `PollEntry`."""
        found: dict[str, JobRecord] = {}
        missing = []
        for job_id in dict.fromkeys(job_ids):
            cached = self._cache.get(job_id)
            if cached is not None:
                found[job_id] = cached
            else:
                missing.append(job_id)
        if missing:
            since = self._cache.reading()
            with self.engine.connect() as connection:
                for row in connection.execute(_SELECT.where(_JOBS.c.id.in_(missing))):
                    record = _read(row)
                    self._cache.offer(record, since)
                    found[record.id] = record
        return found

    def mark_submit_attempt(self, job_id: str) -> JobRecord:
        """Say, before sending, that a submission is being tried now."""
        return self._update(job_id, submit_attempted_at=self._clock())

    def set_native_id(self, job_id: str, native_id: str, message: str) -> JobRecord:
        """The scheduler accepted the job: it is queued from now on, and nobody's to send.
        Submitters answered at the same time share one commit (`GroupCommit`); KeyError for
        a job that is not recorded."""
        return self._native_ids((job_id, native_id, message))

    def _set_native_ids(
        self, asked: Sequence[tuple[str, str, str]]
    ) -> list[JobRecord | BaseException]:
        """`set_native_id` for each (job id, native id, message), in one transaction."""
        now = self._clock()
        answers: list[JobRecord | BaseException] = []
        changed: list[tuple[JobRecord, str | None]] = []
        with self.writing() as session:
            ids = list({job_id for job_id, _, _ in asked})
            query = select(JobRow).where(JobRow.id.in_(ids))
            rows = {row.id: row for row in session.scalars(query)}
            logged: list[NewEvent] = []
            for job_id, native_id, message in asked:
                row = rows.get(job_id)
                if row is None:
                    answers.append(KeyError(job_id))
                    continue
                members_before = list(row.members or [])
                elements_before = row.elements or []
                fields = {"native_id": native_id, "claimed_by": _NOBODY}
                previous = _change(row, JobState.QUEUED, message, now, fields)
                logged.extend(_job_events(row, previous, members_before, elements_before))
                record = _record(row)
                self._on_commit(session, job_id, record)
                answers.append(record)
                changed.append((record, previous))
            write_events(session, logged, now)
        for record, previous in changed:
            _state_changed(record, previous)
        return answers

    def claim(self, job_id: str, replica_id: str, *, live: Sequence[str]) -> bool:
        """Make `replica_id` the one that sends the job, unless a replica in `live` (the
        others known to be alive) has it: True when it is `replica_id`'s now.

        One conditional UPDATE, so two replicas claiming at once cannot both win. A claim
        ends with `release`, with the job's native id, or with its holder (its heartbeat
        stops, see `replicas`); the claimant's own `live` view decides the last.
        """
        others = [r for r in live if r != replica_id]
        query = update(JobRow).where(JobRow.id == job_id)
        if others:  # else any holder is dead or this replica
            query = query.where(or_(JobRow.claimed_by.is_(None), JobRow.claimed_by.not_in(others)))
        with self.writing() as session:
            result = session.execute(
                query.values(claimed_by=replica_id).execution_options(synchronize_session=False)
            )
            won = bool(getattr(result, "rowcount", 0))
            self._on_commit(session, job_id, None)
        return won

    def release(self, job_id: str, replica_id: str) -> None:
        """End `replica_id`'s claim on the job (nothing when another replica holds it)."""
        with self.writing() as session:
            session.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.claimed_by == replica_id)
                .values(claimed_by=None)
                .execution_options(synchronize_session=False)
            )
            self._on_commit(session, job_id, None)

    def release_all(self, replica_id: str) -> int:
        """End every claim of `replica_id` (a replica that stops); how many there were."""
        with self.writing() as session:
            result = session.execute(
                update(JobRow)
                .where(JobRow.claimed_by == replica_id)
                .values(claimed_by=None)
                .execution_options(synchronize_session=False)
            )
            count = int(getattr(result, "rowcount", 0))
            self._on_commit(session, None, None)
        return count

    def mark_cancel_sent(self, job_id: str) -> JobRecord:
        """The scheduler has answered the job's cancel: no replica sends it again."""
        return self._update(job_id, cancel_sent=True)

    def request_cancel(self, job_id: str) -> JobRecord:
        return self._update(job_id, desired="canceled")

    def restarted(self, job_id: str, message: str) -> JobRecord:
        """The scheduler runs the job again under the same native id: back to `queued` (the
        history keeps the earlier run's states and this restart), the last run's exit code
        and members forgotten, a recorded cancel withdrawn (it was for the earlier run)."""
        return self._transition(
            job_id,
            JobState.QUEUED,
            message,
            exit_code=_NOBODY,
            members=[],
            elements=[],
            desired="submitted",
            cancel_sent=False,
        )

    def transition(
        self,
        job_id: str,
        state: JobState,
        message: str,
        *,
        exit_code: int | None = None,
        unclaim: bool = False,
        cancel_sent: bool = False,
    ) -> JobRecord:
        """Move to `state` (recorded in the history when it changes); in the same commit,
        `unclaim` ends the job's claim and `cancel_sent` records that the scheduler has
        answered its cancel."""
        return self._transition(
            job_id,
            state,
            message,
            exit_code=exit_code,
            claimed_by=_NOBODY if unclaim else None,
            cancel_sent=True if cancel_sent else None,
        )

    def transition_many(self, changes: Sequence[StateChange]) -> None:
        """Apply a poll cycle's changes in one transaction (one commit, not one per job)."""
        if not changes:
            return
        now = self._clock()
        with self.writing() as session:
            rows = {
                row.id: row
                for row in session.scalars(
                    select(JobRow).where(JobRow.id.in_([change.job_id for change in changes]))
                )
            }
            changed: list[tuple[JobRecord, str | None]] = []
            logged: list[NewEvent] = []
            for change in changes:
                row = rows.get(change.job_id)
                if (
                    row is not None
                    and change.read_at is not None
                    and (row.updated_at != change.read_at)
                ):
                    log.info(
                        "job %s changed while it was polled; its new state %s waits for "
                        "the next poll",
                        change.job_id,
                        change.state.value,
                    )
                    continue
                if row is not None:
                    members_before = list(row.members or [])
                    elements_before = row.elements or []
                    previous = _change(
                        row,
                        change.state,
                        change.message,
                        now,
                        {
                            "exit_code": change.exit_code,
                            "members": change.members,
                            "elements": change.elements,
                        },
                    )
                    record = _record(row)
                    self._on_commit(session, record.id, record)
                    changed.append((record, previous))
                    logged.extend(_job_events(row, previous, members_before, elements_before))
            write_events(session, logged, now)
        for record, previous in changed:
            _state_changed(record, previous)

    def _transition(self, job_id: str, state: JobState, message: str, **fields: Any) -> JobRecord:
        now = self._clock()
        with self.writing() as session:
            row = session.get(JobRow, job_id)
            if row is None:
                raise KeyError(job_id)
            members_before = list(row.members or [])
            elements_before = row.elements or []
            previous = _change(row, state, message, now, fields)
            write_events(session, _job_events(row, previous, members_before, elements_before), now)
            record = _record(row)
            self._on_commit(session, job_id, record)
        return _state_changed(record, previous)

    def _update(self, job_id: str, **fields: Any) -> JobRecord:
        with self.writing() as session:
            row = session.get(JobRow, job_id)
            if row is None:
                raise KeyError(job_id)
            for key, value in fields.items():
                setattr(row, key, value)
            row.updated_at = self._clock()
            record = _record(row)
            self._on_commit(session, job_id, record)
        return record

    def withdraw(self, job_id: str, message: str) -> JobRecord:
        """A submission refused before the scheduler saw it, the client told to try again:
        the record ends `failed` and gives up its idempotency key (one commit), so the retry
        with the same key submits afresh instead of replaying this refusal."""
        with self.writing() as session:
            row = session.get(JobRow, job_id)
            if row is None:
                raise KeyError(job_id)
            row.idempotency_key = None
            now = self._clock()
            previous = _change(row, JobState.FAILED, message, now, {})
            write_events(session, _job_events(row, previous, [], row.elements or []), now)
            record = _record(row)
            self._on_commit(session, job_id, record)
        return _state_changed(record, previous)


class IdempotencyKeyTakenError(GatewayError):
    """Another submission recorded the same (owner, idempotency key) first: `earlier`."""

    code = "idempotency_key_taken"

    def __init__(self, earlier: JobRecord) -> None:
        self.earlier = earlier
        super().__init__(f"idempotency key {earlier.idempotency_key!r} is held by job {earlier.id}")


@dataclass(frozen=True)
class StateChange:
    """A new state for one job, as a poll cycle found it."""

    job_id: str
    state: JobState
    message: str
    exit_code: int | None = None
    members: list[dict[str, Any]] | None = None  # a cluster job's members, when (re)read
    elements: list[list[Any]] | None = None  # an array's elements (`ArrayElements.dump`)
    read_at: float | None = None  # the record's updated_at the change was made from: the
    # change is dropped if the job changed since (the next poll sees it afresh)


_NOBODY = object()
"""A field value meaning "set to NULL" where None means "leave as it is" (`_change`)."""


def _change(
    row: JobRow, state: JobState, message: str, now: float, fields: dict[str, Any]
) -> str | None:
    """Apply a change to ROW; its state before, when the change moved it to another one."""
    previous = row.state if row.state != state.value else None
    for key, value in fields.items():
        if value is _NOBODY:
            setattr(row, key, None)
        elif value is not None:
            setattr(row, key, value)
    if row.state != state.value or row.message != message:
        row.history = [*row.history, {"state": state.value, "time": now, "message": message}]
    row.state, row.message, row.updated_at = state.value, message, now
    return previous


def _job_columns(now: float, job: NewJob) -> dict[str, Any]:
    """The columns of a new job's row, recorded at `now`."""
    return dict(
        id=job.get("job_id") or str(uuid.uuid4()),
        owner=job["owner"],
        resource_id=job["resource_id"],
        idempotency_key=job.get("idempotency_key"),
        request_hash=job.get("request_hash"),
        spec=job["spec"],
        effective_spec=job["effective_spec"],
        plan=job["plan"],
        script=job["script"],
        native_id=None,
        state=JobState.NEW.value,
        desired="submitted",
        exit_code=None,
        message="accepted by the gateway",
        history=[{"state": "new", "time": now, "message": "accepted by the gateway"}],
        members=[],
        submit_attempted_at=now if job.get("submitting") else None,
        created_at=now,
        updated_at=now,
        claimed_by=job.get("claimed_by"),
        cancel_sent=False,
        account=job.get("account"),
    )


def _created_event(columns: dict[str, Any]) -> NewEvent:
    """The event of a job recorded (state `new`)."""
    return NewEvent(
        owner=columns["owner"],
        kind=JOB,
        state=columns["state"],
        message=columns["message"],
        resource_id=columns["resource_id"],
        job_id=columns["id"],
    )


def _job_events(
    row: JobRow,
    previous: str | None,
    members_before: list[dict[str, Any]],
    elements_before: list[list[Any]],
) -> list[NewEvent]:
    """The events of a change `_change` made to ROW: the job's own when its state moved
    from PREVIOUS, one per member of a cluster job whose state differs from MEMBERS_BEFORE
    (a member not known before counts as moved from none), and one per element of an array
    whose state differs from ELEMENTS_BEFORE (`_element_events`)."""
    events: list[NewEvent] = []
    if previous is not None:
        events.append(
            NewEvent(
                owner=row.owner,
                kind=JOB,
                state=row.state,
                previous=previous,
                message=row.message,
                resource_id=row.resource_id,
                job_id=row.id,
            )
        )
    before = {member.get("name"): member.get("state") for member in members_before}
    for member in row.members or []:
        name, state = member.get("name"), member.get("state")
        if isinstance(name, str) and isinstance(state, str) and before.get(name) != state:
            was = before.get(name)
            events.append(
                NewEvent(
                    owner=row.owner,
                    kind=MEMBER,
                    state=state,
                    previous=was if isinstance(was, str) else None,
                    resource_id=row.resource_id,
                    job_id=row.id,
                    member=name[:255],
                )
            )
    if row.elements and row.elements != elements_before:
        events.extend(_element_events(row, elements_before))
    return events


def _element_events(row: JobRow, elements_before: list[list[Any]]) -> list[NewEvent]:
    """One event per element of an array job whose state moved (an element not known
    before counts as moved from none); the element's index in `member`, its exit code
    in the message once it ended."""
    before = dict(ArrayElements.load(elements_before)) if elements_before else {}
    events = []
    for index, element in ArrayElements.load(row.elements):
        was = before.get(index)
        if was is not None and was.state == element.state:
            continue
        code = f"exit code {element.exit_code}" if element.exit_code is not None else None
        events.append(
            NewEvent(
                owner=row.owner,
                kind=ELEMENT,
                state=element.state.value,
                previous=was.state.value if was is not None else None,
                message=code,
                resource_id=row.resource_id,
                job_id=row.id,
                member=str(index),
            )
        )
    return events


def _state_changed(record: JobRecord, previous: str | None) -> JobRecord:
    """RECORD, after the `job.state_changed` line when it moved from state PREVIOUS (written
    once the change is committed; the job's message, which may quote a scheduler's output,
    stays in the store)."""
    if previous is not None:
        event(
            log,
            events.JOB_STATE,
            f"job {record.id} {previous} -> {record.state.value}",
            **job_fields(record),
            previous=previous,
            state=record.state.value,
            native_id=record.native_id,
        )
    return record


def _matching(query: Select[_Row], **filters: Unpack[JobFilters]) -> Select[_Row]:
    """`query` narrowed to the rows every given filter admits (`find` and `count` share it,
    so a page and its total always agree). A filter it does not know is a TypeError, as an
    unknown keyword is: never a filter silently dropped (every job matching)."""
    unknown = sorted(set(filters) - set(JobFilters.__annotations__))
    if unknown:
        raise TypeError(
            f"unknown job filters: {', '.join(unknown)} (known: "
            f"{', '.join(JobFilters.__annotations__)})"
        )
    owner, resource_id = filters.get("owner"), filters.get("resource_id")
    states, name, text = filters.get("states"), filters.get("name"), filters.get("text")
    if owner is not None:
        query = query.where(JobRow.owner == owner)
    if resource_id is not None:
        query = query.where(JobRow.resource_id == resource_id)
    if states is not None:
        query = query.where(JobRow.state.in_([s.value for s in states]))
    if name is not None:
        query = query.where(JobRow.spec["name"].as_string() == name)
    if text:
        query = query.where(
            or_(
                JobRow.spec["name"].as_string().icontains(text, autoescape=True),
                JobRow.id.icontains(text, autoescape=True),
            )
        )
    return query
