"""`scontrol ping`: does slurmctld answer? The health probe of a Slurm resource.

FirecREST v2 probes Slurm the same way: `scontrol ping` asks every configured controller and
prints one line each, `Slurmctld(primary) at HOST is UP` (or `DOWN`). Up means every line
says UP; otherwise the scheduler's own lines are the reason.
"""

from __future__ import annotations

from iri_gateway.errors import PingError
from iri_gateway.transport.base import CommandResult


def argv() -> list[str]:
    return ["scontrol", "ping"]


def parse(result: CommandResult) -> str:
    """The controllers' lines when all are UP; PingError (with them) otherwise."""
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    if result.ok and lines and all(line.endswith(" is UP") for line in lines):
        return "; ".join(lines)
    raise PingError(result.argv, result.exit_code, result.stdout, result.stderr)
