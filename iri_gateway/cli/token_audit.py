"""The operator's token commands in the audit log: `createToken` and `revokeToken` records.

The token commands change the tokens file, not the API, so the audit middleware never sees
them; they record themselves, in the store the settings name (the server's), as the operator's
login (admin), with the token's user and id as the target (never the token). No request
is being served, so the request and trace ids are empty. The record is written after the
file changed: when the store cannot be reached, the change stands and the command says on
stderr that it is not in the audit log (and why), instead of hiding it.
"""

from __future__ import annotations

import getpass
import os
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from iri_gateway.cli import consoles
from iri_gateway.errors import GatewayError
from iri_gateway.service.operations.audit import AuditEntry, AuditLog
from iri_gateway.service.operations.settings import Settings
from iri_gateway.service.operations.store import JobStore


def operator() -> str:
    """Who runs the command: the login name, else the numeric uid."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return f"uid {os.getuid()}"


def record_token_change(
    settings: Settings, *, operation: str, targets: list[str], make_store: bool = False
) -> None:
    """Record a token change the operator made, one record per target (see the module's
    docstring), through one opening of the store.

    A SQLite store that does not exist yet is made only with MAKE_STORE (the first `serve`,
    which is about to use it): a token command run without the server's settings (its
    `IRI_GATEWAY_DATABASE_URL`) would otherwise leave a SQLite store in the data directory
    that no server reads, and its record where nobody looks; it says so instead."""
    login = operator()
    sqlite_file = _sqlite_file(settings.store_url)
    if not make_store and sqlite_file is not None and not sqlite_file.exists():
        consoles.err().print(
            f"warning: {operation} ({', '.join(targets)}) is done but not in the audit log: "
            f"there is no store at {sqlite_file} yet (no server has used this data directory; "
            "for a server on PostgreSQL, run this with its IRI_GATEWAY_DATABASE_URL)",
            markup=False,
        )
        return
    try:
        store = JobStore(settings.store_url, pool_size=1)
        try:
            audit = AuditLog(store)
            for target in targets:
                audit.record(
                    AuditEntry(
                        user=login,
                        admin=True,
                        operation=operation,
                        outcome="succeeded",
                        target=target,
                    )
                )
        finally:
            store.close()
    except (GatewayError, SQLAlchemyError) as error:
        consoles.err().print(
            f"warning: {operation} ({', '.join(targets)}) is done but not (all) in the audit "
            f"log: {error}",
            markup=False,
        )


def _sqlite_file(url: str) -> Path | None:
    """The file of a SQLite store URL, or None for another database (or in memory)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return None
    if parsed.database == ":memory:":
        return None
    return Path(parsed.database)
