"""The audit table on SQLite and on a real PostgreSQL: records are appended and read back newest
first; the database itself refuses an UPDATE, a DELETE of a record younger than a day and
(PostgreSQL) a TRUNCATE, whoever sends the SQL; the retention sweep deletes the old records
only."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.exc import DBAPIError

from iri_gateway.service.operations.audit import DAY, AuditEntry, AuditLog
from iri_gateway.service.operations.migrations import head_revision
from iri_gateway.service.operations.store import JobStore
from tests.databases import database_url, postgres_server, postgres_url  # noqa: F401
from tests.service.operations.test_migrations import (
    at_revision_with_a_kept_job,
    plain_engine,
    revision_of,
)


def entry(user: str, operation: str = "launchJob") -> AuditEntry:
    return AuditEntry(
        user=user,
        admin=False,
        operation=operation,
        outcome="succeeded",
        resource_id="local",
        target="job 1",
        status=200,
        request_id=f"r-{user}",
    )


def test_the_database_refuses_to_change_or_erase_a_record(database_url: str) -> None:  # noqa: F811
    store = JobStore(database_url)
    try:
        audit = AuditLog(store)
        first = audit.record(entry("alice"))
        audit.record(entry("bob", "rm"))
        statements = [
            "UPDATE audit SET \"user\" = 'mallory'",
            "UPDATE audit SET outcome = 'refused' WHERE id = :id",
            "DELETE FROM audit WHERE id = :id",
            "DELETE FROM audit",
        ]
        if store.engine.dialect.name == "postgresql":
            statements.append("TRUNCATE audit")
        for statement in statements:
            with pytest.raises(DBAPIError) as refused, store.engine.begin() as connection:
                connection.execute(text(statement), {"id": first})
            assert "the audit log" in str(refused.value), statement
        page = audit.page(offset=0, limit=10)
        assert [(r.entry.user, r.entry.outcome) for r in page.records] == [
            ("bob", "succeeded"),
            ("alice", "succeeded"),
        ]
        assert page.records[1].entry == entry("alice")
    finally:
        store.close()


def test_the_sweep_removes_only_records_past_the_retention(database_url: str) -> None:  # noqa: F811
    store = JobStore(database_url)
    now = time.time()
    try:
        for age_days, user in ((40, "ancient"), (31, "old"), (29, "recent"), (0, "today")):
            AuditLog(store, clock=lambda age=age_days: now - age * DAY).record(entry(user))
        assert AuditLog(store).sweep(retention_days=30) == 2
        left = AuditLog(store).page(offset=0, limit=10).records
        assert [r.entry.user for r in left] == ["today", "recent"]
        # a retention shorter than the database's floor of one day cannot erase today's
        with pytest.raises(DBAPIError, match="at least 1 day"):
            AuditLog(store, clock=lambda: now + DAY / 2).sweep(retention_days=0)
        assert len(AuditLog(store).page(offset=0, limit=10).records) == 2
    finally:
        store.close()


def test_a_revision_0008_database_gains_the_audit_table_and_keeps_its_jobs(
    database_url: str,  # noqa: F811
) -> None:
    at_revision_with_a_kept_job(database_url, "0008")
    assert "audit" not in inspect(plain_engine(database_url)).get_table_names()
    store = JobStore(database_url)
    try:
        assert revision_of(database_url) == "0015" == head_revision()
        assert store.get("kept") is not None
        AuditLog(store).record(entry("alice"))
        with pytest.raises(DBAPIError, match="append-only"), store.engine.begin() as connection:
            connection.execute(text("UPDATE audit SET admin = true"))
    finally:
        store.close()
