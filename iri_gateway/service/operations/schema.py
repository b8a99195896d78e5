"""The store's tables as SQLAlchemy models: jobs, the gateway processes sharing the store
(replicas), the leases they hold, the job templates users keep, the audit log, and the event log.

The tables themselves are made and changed by the migrations only (`migrations/`); a test
holds these models and the migrated schema to each other.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class JobRow(Base):
    """A row of `jobs`: one job the gateway accepted."""

    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("owner", "idempotency_key", name="uq_owner_key"),
        # Pages of one user's jobs in creation order, on one resource and on all of them
        # (migration 0008).
        Index("ix_jobs_pages", "owner", "resource_id", "created_at", "id"),
        Index("ix_jobs_owner_pages", "owner", "created_at", "id"),
    )

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
        JSON, default=list, server_default=text("'[]'")
    )
    # The elements of an array job as runs (`models.array_elements.ArrayElements.dump`), as
    # the engine last read them; [] for other jobs, and for an array not yet polled.
    elements: Mapped[list[list[Any]]] = mapped_column(
        JSON, default=list, server_default=text("'[]'")
    )
    submit_attempted_at: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    # The replica sending the job to the scheduler now (or about to try again): the others'
    # reconcile leaves the job alone while that replica lives. NULL: nobody is.
    claimed_by: Mapped[str | None] = mapped_column(String(36), index=True)
    # The scheduler has answered the recorded cancel: no replica sends it again.
    cancel_sent: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    # The login account that runs the job, as the resource's mapping gave it at submission
    # ('' the gateway's own): the poller and a later cancel act as it without the caller's
    # identity (issue 31). NULL for jobs recorded before revision 0014: mapped by name.
    account: Mapped[str | None] = mapped_column(String(32))


class ReplicaRow(Base):
    """A row of `replicas`: one gateway process that uses (or used) the store."""

    __tablename__ = "replicas"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    # Where `pid` means something: the kernel's boot id and the process's pid namespace
    # (two containers can share a host name and not their pids). NULL: unknown.
    pid_space: Mapped[str | None] = mapped_column(String(255))
    started_at: Mapped[float] = mapped_column(Float)
    heartbeat_at: Mapped[float] = mapped_column(Float, index=True)
    stopped_at: Mapped[float | None] = mapped_column(Float)


class LeaseRow(Base):
    """A row of `leases`: work one replica does for all (a resource's status polling).

    A lease has no expiry of its own: it is valid while its holder's heartbeat is, so a
    replica renews all its leases with one write."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    holder: Mapped[str] = mapped_column(String(36))
    taken_at: Mapped[float] = mapped_column(Float)


class TemplateRow(Base):
    """A row of `templates`: one job template a user keeps (facility templates live in the
    profiles, not here). A user's names are unique: (owner, name) is the key."""

    __tablename__ = "templates"

    owner: Mapped[str] = mapped_column(String(255), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    body: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class UpdateKeyRow(Base):
    """A row of `update_keys`: the `Idempotency-Key` an update of a job came with, and a
    digest of the request, so that a retry is answered without telling the scheduler twice
    (and the same key with another request is refused). (owner, key) is the key."""

    __tablename__ = "update_keys"

    owner: Mapped[str] = mapped_column(String(255), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    job_id: Mapped[str] = mapped_column(String(36))
    request_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)


class TaskRow(Base):
    """A row of `tasks`: one filesystem operation of one user, as the IRI task operations
    show it (status, result, the command asked). Kept in the store, not in a process, so
    that any replica reads it; `replica_id` runs it while it is pending or active."""

    __tablename__ = "tasks"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner: Mapped[str] = mapped_column(String(255), index=True)
    replica_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    command: Mapped[dict[str, Any]] = mapped_column(JSON)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class RateCountRow(Base):
    """A row of `rate_counts`: how many requests of one kind (`read`, `write`) one user made
    through one replica in one window of the rate limits (`slot`: the window's start time
    divided by its length). Each replica rewrites its own rows at every sync and reads the
    others' sums, so that the replicas share one limit per user (see `rate_limits`)."""

    __tablename__ = "rate_counts"

    replica_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner: Mapped[str] = mapped_column(String(255), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    slot: Mapped[int] = mapped_column(Integer, primary_key=True)
    count: Mapped[int] = mapped_column(Integer)


class AuditRow(Base):
    """A row of `audit`: one state-changing call (or a refused attempt at one), written once
    and never changed; the database's triggers refuse updates and early deletes (migration
    0009). `at` is the time it was recorded, seconds since the epoch."""

    __tablename__ = "audit"
    __table_args__ = (
        Index("ix_audit_at", "at", "id"),
        Index("ix_audit_user_at", "user", "at", "id"),
        Index("ix_audit_operation_at", "operation", "at", "id"),
    )

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    at: Mapped[float] = mapped_column(Float)
    user: Mapped[str] = mapped_column(String(255))
    admin: Mapped[bool] = mapped_column(Boolean)
    operation: Mapped[str] = mapped_column(String(64))
    resource_id: Mapped[str | None] = mapped_column(String(63), nullable=True)
    target: Mapped[str | None] = mapped_column(Text, nullable=True)
    outcome: Mapped[str] = mapped_column(String(16))
    status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    error: Mapped[str | None] = mapped_column(String(255), nullable=True)
    request_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    trace_id: Mapped[str | None] = mapped_column(String(32), nullable=True)


class EventRow(Base):
    """A row of `events`: one state change of a job, a cluster job's member or a file task,
    written in the transaction that made the change (`service/events/log.py`); ids only
    grow (AUTOINCREMENT on SQLite), so an id names one place in the log for ever."""

    __tablename__ = "events"
    __table_args__ = (
        Index("ix_events_owner_id", "owner", "id"),
        Index("ix_events_at", "at"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    at: Mapped[float] = mapped_column(Float)
    owner: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(16))
    resource_id: Mapped[str | None] = mapped_column(String(63), nullable=True)
    job_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    member: Mapped[str | None] = mapped_column(String(255), nullable=True)
    task_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    state: Mapped[str] = mapped_column(String(16))
    previous: Mapped[str | None] = mapped_column(String(16), nullable=True)
    message: Mapped[str | None] = mapped_column(Text, nullable=True)


class WebhookSubscriptionRow(Base):
    """A row of `webhook_subscriptions`: one user's standing webhook (migration 0011): where
    to POST which job states, and the secret its deliveries are signed with."""

    __tablename__ = "webhook_subscriptions"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner: Mapped[str] = mapped_column(String(255), index=True)
    url: Mapped[str] = mapped_column(Text)
    events: Mapped[list[str]] = mapped_column(JSON)
    resource_id: Mapped[str | None] = mapped_column(String(63), nullable=True)
    secret: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Float)


class WebhookSecretRow(Base):
    """A row of `webhook_secrets`: the secret a user's jobs' `notify` deliveries are signed
    with (one per user, replaced when the user asks for a new one)."""

    __tablename__ = "webhook_secrets"

    owner: Mapped[str] = mapped_column(String(255), primary_key=True)
    secret: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Float)


class WebhookDeliveryRow(Base):
    """A row of `webhook_deliveries`, the outbox: one event to send to one target (a
    subscription, or a job's `notify`), until delivered or given up. (event_id, target) is
    unique: an event becomes each of its deliveries once. `claimed_by` sends it now, until
    `claimed_until`; after that another replica may."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("event_id", "target", name="uq_delivery_event_target"),
        Index("ix_deliveries_due", "status", "next_attempt_at"),
        Index("ix_deliveries_subscription", "subscription_id", "created_at"),
        Index("ix_deliveries_job", "owner", "job_id", "created_at"),
        Index("ix_deliveries_finished", "finished_at"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner: Mapped[str] = mapped_column(String(255))
    target: Mapped[str] = mapped_column(String(64))
    subscription_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    job_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    resource_id: Mapped[str | None] = mapped_column(String(63), nullable=True)
    event_id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"))
    event_state: Mapped[str] = mapped_column(String(16))
    url: Mapped[str] = mapped_column(Text)
    body: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Float)
    next_attempt_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    claimed_by: Mapped[str | None] = mapped_column(String(36), nullable=True)
    claimed_until: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class WebhookCursorRow(Base):
    """A row of `webhook_cursor`: the last event the outbox has turned into deliveries,
    advanced in the transaction that inserts them."""

    __tablename__ = "webhook_cursor"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    event_id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"))


class GatewayKeyRow(Base):
    """A row of `gateway_keys`: a secret of the gateway itself, shared by every replica
    through the store (made once, by whichever replica needs it first)."""

    __tablename__ = "gateway_keys"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    secret: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Float)


class ProxyTicketRow(Base):
    """A row of `proxy_tickets`: a port proxy link's ticket that was opened, kept until it
    would have expired, so that it opens only once (on whichever replica)."""

    __tablename__ = "proxy_tickets"

    nonce: Mapped[str] = mapped_column(String(64), primary_key=True)
    expires_at: Mapped[float] = mapped_column(Float, index=True)


class ConsoleSessionRow(Base):
    """A row of `console_sessions`: a console session opened by an OpenID sign-in; its id
    and CSRF token as digests, its tokens sealed with a key only the browser holds
    (`service.accounts.console_sessions`)."""

    __tablename__ = "console_sessions"

    id_digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    user: Mapped[str] = mapped_column(String(255), index=True)
    sealed_access_token: Mapped[str] = mapped_column(Text)
    sealed_id_token: Mapped[str] = mapped_column(Text)
    csrf_digest: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float, index=True)


class SignInAttemptRow(Base):
    """A row of `sign_in_attempts`: an OpenID sign-in under way, under its state's digest,
    bound to the browser that began it."""

    __tablename__ = "sign_in_attempts"

    state_digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    binding_digest: Mapped[str] = mapped_column(String(64))
    nonce: Mapped[str] = mapped_column(String(128))
    verifier: Mapped[str] = mapped_column(String(128))
    next_page: Mapped[str] = mapped_column(String(512))
    expires_at: Mapped[float] = mapped_column(Float, index=True)
