"""Opening the job store's database: the URL made explicit, SQLite tuned, the schema brought
up to date, and a database that cannot be reached named in one line instead of a traceback.

SQLite (a file in the data directory) is the zero-configuration default; PostgreSQL, through
psycopg 3, is the production store. `postgresql://` URLs name psycopg 3 explicitly
(`postgresql+psycopg://`): SQLAlchemy would otherwise pick psycopg2, which is not installed.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

import orjson
from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from iri_gateway.errors import GatewayError
from iri_gateway.service.operations.store_spans import trace_statements

_POSTGRES_SCHEMES = ("postgresql", "postgres")


class DatabaseError(GatewayError):
    """The store's database cannot be used: a bad URL, no server, a schema it cannot run on.

    The message names the database without its password and says why, in one line. A
    transient fault: `retry_after` is the pause, in seconds, suggested to clients.
    """

    code = "database_unavailable"
    retry_after = 5


def transient(error: SQLAlchemyError) -> DatabaseError:
    """A fault of the database while it was in use (it refused or lost the connection, a
    lock or the connection pool did not free up in time), as a DatabaseError in one line:
    the request may succeed when sent again."""
    if isinstance(error, DBAPIError) and error.orig is not None:
        reason = " ".join(str(error.orig).split())
    else:
        reason = " ".join(str(error).split()).split(" (Background on this error")[0]
    return DatabaseError(
        f"the gateway's database did not take the request: {reason[:300]}; "
        "nothing was changed by this request, send it again"
    )


def normalise_url(url: str) -> str:
    """`url` with PostgreSQL's driver named: `postgresql://` and `postgres://` become
    `postgresql+psycopg://`; any other URL (SQLite, a driver already named) is kept as is."""
    scheme, separator, rest = url.partition("://")
    if separator and scheme in _POSTGRES_SCHEMES:
        return f"postgresql+psycopg://{rest}"
    return url


def display_url(url: str | URL) -> str:
    """The URL to show in logs and errors: its password replaced by `***`."""
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except ArgumentError:
        return "(an unparseable database URL)"
    return parsed.render_as_string(hide_password=True)


def is_sqlite(url: str | URL) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


DEFAULT_POOL_SIZE = 24
"""PostgreSQL connections a gateway process keeps open: its submitter's workers (16 per
resource by default) and request threads draw on them at once. Below what they draw, the
pool opens and closes a connection per use beyond it (measured: 64-98 new sessions per 200
launches with SQLAlchemy's default 5, each 10-12 ms of the server's CPU)."""


def json_loads(text: str | bytes) -> Any:
    """A JSON column's value: orjson, about twice as fast as `json` on every read of a job;
    what orjson refuses and `json.dumps` may have written (NaN, an integer past 64 bits, a
    lone surrogate) is read by `json`, so every stored value reads back as it always did."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def open_engine(url: str, *, pool_size: int = DEFAULT_POOL_SIZE) -> Engine:
    """A SQLAlchemy engine for `url` (normalised), not yet connected; it keeps `pool_size`
    connections (and opens as many more for a burst), SQLite and PostgreSQL alike.

    DatabaseError when the URL cannot be parsed or names a driver that is not installed.
    """
    url = normalise_url(url)
    try:
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite":
            # The same pool size as PostgreSQL's: with SQLAlchemy's default of 5 (and 10 more
            # opened and closed as needed), the request threads and the submitter's workers
            # opened a connection, set its pragmas and closed it again on many reads under
            # load (3-4 % of serve's time in the IRI mix, docs/benchmarks.md).
            engine = create_engine(
                parsed,
                connect_args={"check_same_thread": False},
                json_deserializer=json_loads,
                pool_size=pool_size,
                max_overflow=pool_size,
            )
            event.listen(engine, "connect", _sqlite_pragmas)
            trace_statements(engine)
            return engine
        # pre_ping: a connection the server closed (a restart, an idle time-out) is replaced
        # before use instead of failing the request that drew it from the pool.
        engine = create_engine(
            parsed,
            pool_pre_ping=True,
            pool_size=pool_size,
            max_overflow=pool_size,
            json_deserializer=json_loads,
        )
        trace_statements(engine)
        return engine
    except ArgumentError as error:
        raise DatabaseError(f"cannot use database {display_url(url)}: {error}") from None
    except (NoSuchModuleError, ImportError) as error:
        raise DatabaseError(
            f"cannot use database {display_url(url)}: no driver for it is installed ({error}); "
            "iri-gateway ships SQLite and PostgreSQL (psycopg 3)"
        ) from None


SQLITE_BUSY_TIMEOUT_MS = 5000
"""How long a SQLite statement waits for another connection's write lock before "database is
locked": a request's wait, short enough to answer a retryable 503."""


def unreachable(url: str | URL, error: DBAPIError) -> DatabaseError:
    """The one-line error for a database that refused or could not take a connection."""
    reason = " ".join(str(error.orig).split()) if error.orig is not None else str(error)
    return DatabaseError(f"cannot use database {display_url(url)}: {reason}")


def _sqlite_pragmas(connection: Any, _record: Any) -> None:
    """WAL lets readers and the poller's writer work at once; a busy wait beats an error."""
    cursor = connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    _enter_wal(cursor)
    # In WAL mode NORMAL survives a crash of the process (what reconcile is for); only a
    # power loss can drop the last commits.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _enter_wal(cursor: Any) -> None:
    """Switch the database file to WAL (once per file; a no-op after), waiting as long as a
    busy statement would.

    Several processes opening a new database at once race to switch it, and SQLite answers
    the loser "database is locked" at once, without its busy wait (it declines to wait where
    two connections could wait for each other): a gateway starting beside another failed so
    (CI saw it). The loser tries again until the busy time-out."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)
