"""`qstat -B`: does the PBS server answer, and in which state? The health probe of a PBS
resource.

FirecREST v2 probes PBS with `qstat -B` too, taking the server states Active, Idle and
Scheduling for up. The plain table is read (one row per server after the dashes line, the
state in its last column), not `-F json`, whose real output is not always JSON
(`qstat_json`).
"""

from __future__ import annotations

from iri_gateway.errors import PingError
from iri_gateway.transport.base import CommandResult

UP_STATES = ("Active", "Idle", "Scheduling")


def argv() -> list[str]:
    return ["qstat", "-B"]


def parse(result: CommandResult) -> str:
    """`SERVER STATE` of each server when all are up; PingError (qstat's words) otherwise."""
    if result.ok:
        lines = result.stdout.splitlines()
        rows = [
            line.split()
            for index, line in enumerate(lines)
            if line.strip() and any(above.startswith("---") for above in lines[:index])
        ]
        if rows and all(row[-1] in UP_STATES for row in rows):
            return "; ".join(f"{row[0]} {row[-1]}" for row in rows)
    raise PingError(result.argv, result.exit_code, result.stdout, result.stderr)
