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


def record_token_change(settings: Settings, *, operation: str, targets: list[str]) -> None:
    """Record a token change the operator made, one record per target (see the module's
    docstring), through one opening of the store."""
    login = operator()
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
