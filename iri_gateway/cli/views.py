"""Tables the local and the client commands print alike (rich), from the shared models."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.table import Table

if TYPE_CHECKING:
    from iri_gateway.models.placement import Placement


def placement_table(ranked: Sequence[Placement]) -> Table:
    """One row per resource, best first: runnable, flavour, runtime, queue, and why (not)."""
    app = ranked[0].app if ranked else None
    title = "Placement"
    if app is not None:
        title += f" of {app.name}" + (f" {app.version}" if app.version else "")
    table = Table(title=title, show_lines=True)
    table.add_column("resource", no_wrap=True)
    for column in ("runnable", "flavour", "runtime", "queue", "notes"):
        table.add_column(column)
    for entry in ranked:
        # A flavour's problem already names its flavour; other problems need their field.
        notes = [p.reason if p.name.startswith("container.flavours") else f"{p.name}: {p.reason}"
                 for p in entry.problems]
        if entry.runnable:
            notes += [f"flavour {f.name} {f.status}: {f.reason}" for f in entry.flavours
                      if f.status == "rejected"]
        notes += entry.warnings
        flavour = entry.flavour or "-"
        if entry.priority is not None:
            flavour += f" ({entry.priority})"
        if entry.role_flavours:  # a cluster job: each role's own choice
            flavour = "\n".join(f"{role}: {chosen or '-'}"
                                for role, chosen in entry.role_flavours.items())
        table.add_row(
            entry.resource,
            "[green]yes[/]" if entry.runnable else "[red]no[/]",
            flavour,
            entry.runtime or "-",
            entry.queue or "-",
            "\n".join(notes),
        )
    return table


def members_table(members: Sequence[Mapping[str, Any]]) -> Table:
    """A cluster job's members as the gateway last read them: who runs where, and how."""
    table = Table(title="Members")
    with_ports = any(member.get("endpoints") for member in members)
    columns = ["member", "role", "node", "address", "state", "exit code"]
    for column in columns + (["endpoints"] if with_ports else []):
        table.add_column(column, no_wrap=True)
    for member in members:
        code = member.get("exit_code")
        state = str(member.get("state", "")) + (" (stopped)" if member.get("stopped") else "")
        row = [
            str(member.get("name", "")), str(member.get("role", "")),
            str(member.get("node", "")), str(member.get("address", "")),
            state, "-" if code is None else str(code),
        ]
        if with_ports:
            endpoints = member.get("endpoints") or {}
            row.append(" ".join(f"{name}={where}" for name, where in endpoints.items()))
        table.add_row(*row)
    return table
