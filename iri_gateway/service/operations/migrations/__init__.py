"""The job store's schema, changed only through these Alembic migrations (`versions/`).

`upgrade_schema` runs at every start of the store: it brings the database to the newest
revision, in one transaction, one process at a time — on PostgreSQL under an advisory lock,
on SQLite under the database file's write lock (`BEGIN IMMEDIATE`), so gateways starting
together never migrate twice or read a half-made table.

Databases made before the migrations existed have a `jobs` table and no `alembic_version`:
the revision they match is recorded (0001 without the `members` column, 0002 with it) and
the newer revisions run from there. A `jobs` table that is not the gateway's is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from iri_gateway.service.operations.database import (
    SQLITE_BUSY_TIMEOUT_MS,
    DatabaseError,
    display_url,
    unreachable,
)

ADVISORY_LOCK_KEY = 0x1121_6A7E_0001
"""The PostgreSQL advisory lock that serialises migrations (a constant of this program)."""

SQLITE_MIGRATION_WAIT_MS = 600_000
"""How long a starting gateway waits on SQLite for another process's migration to end."""

FIRST_RELEASE_COLUMNS = frozenset(
    {
        "id",
        "owner",
        "resource_id",
        "idempotency_key",
        "request_hash",
        "spec",
        "effective_spec",
        "plan",
        "script",
        "native_id",
        "state",
        "desired",
        "exit_code",
        "message",
        "history",
        "submit_attempted_at",
        "created_at",
        "updated_at",
    }
)
"""The columns of `jobs` as revision 0001 makes them: what a database from before the
migrations must hold to be taken as the gateway's."""


def alembic_config() -> Config:
    """The migrations' Alembic configuration, from the package folder (no alembic.ini)."""
    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent))
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def upgrade_schema(engine: Engine) -> None:
    """Bring the database to the newest revision (see the module's docstring).

    DatabaseError, in one line naming the database without its password, when it cannot be
    reached, holds a `jobs` table that is not the gateway's, or was migrated by a newer
    gateway (a revision this one does not know).
    """
    config = alembic_config()
    try:
        with _migration_transaction(engine) as connection:
            config.attributes["connection"] = connection
            _stamp_unversioned(connection, config, engine)
            command.upgrade(config, "head")
    except DBAPIError as error:
        raise unreachable(engine.url, error) from None
    except CommandError as error:
        raise DatabaseError(
            f"database {display_url(engine.url)}: {error}; this gateway knows the revisions "
            f"up to {head_revision()} (was the database migrated by a newer gateway?)"
        ) from None


@contextmanager
def _migration_transaction(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction that only one process at a time holds, committed at
    the end (rolled back on an error)."""
    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            # pysqlite starts its own transactions only before data changes, and not before
            # DDL: taking the write lock first makes the whole migration one transaction that
            # a second process waits for instead of racing. The wait is the migration's, not
            # a request's busy time-out: a loaded machine migrates for longer than 5 s, and a
            # start that gave up then failed with "database is locked" (CI saw it).
            connection.exec_driver_sql(f"PRAGMA busy_timeout={SQLITE_MIGRATION_WAIT_MS}")
            try:
                connection.exec_driver_sql("BEGIN IMMEDIATE")
            finally:
                connection.exec_driver_sql(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        elif engine.dialect.name == "postgresql":
            # Released by the commit or rollback; DDL is transactional on PostgreSQL.
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY}
            )
        yield connection
        connection.commit()


def _stamp_unversioned(connection: Connection, config: Config, engine: Engine) -> None:
    """Record the revision of a database made before the migrations (see the docstring)."""
    inspector = inspect(connection)
    tables = set(inspector.get_table_names())
    if "jobs" not in tables or "alembic_version" in tables:
        return
    columns = {column["name"] for column in inspector.get_columns("jobs")}
    missing = FIRST_RELEASE_COLUMNS - columns
    if missing:
        raise DatabaseError(
            f"database {display_url(engine.url)}: its table 'jobs' lacks the columns "
            f"{', '.join(sorted(missing))}: it was not made by iri-gateway; use another "
            "database"
        )
    command.stamp(config, "0002" if "members" in columns else "0001")
