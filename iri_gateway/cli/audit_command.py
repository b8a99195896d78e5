"""`iri-gateway audit`: a facility admin reads the audit log of a running server.

A client command like the scientist's (through the SDK, `--server` and `--token` alike, the
same exit codes: 2 for a refused filter, 1 for any other error, a non-admin's 403 included),
with the API's filters: `--user`, `--operation`, `--since`, `--until` (ISO 8601 with a time
zone), `--limit` and `--offset`; newest first, as a table or, with `--json`, the server's page.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from iri_gateway.cli import consoles
from iri_gateway.cli.scientist.client_commands import (
    JsonOption,
    ServerOption,
    TokenOption,
    _gateway,
)
from iri_gateway.client.models import DEFAULT_URL

_COLUMNS = ("time", "user", "operation", "resource", "target", "outcome", "request id")


def _row(record: dict[str, Any]) -> tuple[str, ...]:
    user = record["user"] + (" (admin)" if record["admin"] else "")
    outcome = record["outcome"]
    if record.get("status") is not None:
        outcome += f" {record['status']}"
    if record.get("error"):
        outcome += f" {record['error']}"
    return (
        str(record["time"]).replace("T", " ")[:19] + "Z",  # to the second, as the console
        user,
        record["operation"],
        record.get("resource_id") or "-",
        record.get("target") or "-",
        outcome,
        record.get("request_id") or "-",
    )


def audit(
    user: Annotated[str | None, typer.Option("--user", help="Only this user's records.")] = None,
    operation: Annotated[
        str | None, typer.Option("--operation", help="Only this operation (e.g. launchJob).")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="Only records at or after this time (ISO 8601 with a zone)."),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", help="Only records before this time (ISO 8601 with a zone)."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="The most records (1 to 200).")] = 50,
    offset: Annotated[int, typer.Option("--offset", help="Records to skip, newest first.")] = 0,
    as_json: JsonOption = False,
    server: ServerOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """The server's audit log, newest first (facility admins only)."""
    with _gateway(server, token) as client:
        page = client.audit(
            user=user, operation=operation, since=since, until=until, limit=limit, offset=offset
        )
    if as_json:
        sys.stdout.write(json.dumps(page, indent=2) + "\n")
        return
    from rich.table import Table

    records = page["records"]
    more = "; more with --offset " + str(offset + limit) if page["more"] else ""
    table = Table(*_COLUMNS, title=f"Audit log ({len(records)} record(s){more})")
    for record in records:
        table.add_row(*_row(record))
    consoles.out().print(table)
