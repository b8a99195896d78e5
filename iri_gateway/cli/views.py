"""Tables the local and the client commands print alike (rich), from the shared models."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from iri_gateway.models.placement import Placement
    from iri_gateway.profiles.capabilities import Capabilities, RuntimeCapability


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
        notes = [
            p.reason if p.name.startswith("container.flavours") else f"{p.name}: {p.reason}"
            for p in entry.problems
        ]
        if entry.runnable:
            notes += [
                f"flavour {f.name} {f.status}: {f.reason}"
                for f in entry.flavours
                if f.status == "rejected"
            ]
        notes += entry.warnings
        flavour = entry.flavour or "-"
        if entry.priority is not None:
            flavour += f" ({entry.priority})"
        if entry.role_flavours:  # a cluster job: each role's own choice
            flavour = "\n".join(
                f"{role}: {chosen or '-'}" for role, chosen in entry.role_flavours.items()
            )
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
            str(member.get("name", "")),
            str(member.get("role", "")),
            str(member.get("node", "")),
            str(member.get("address", "")),
            state,
            "-" if code is None else str(code),
        ]
        if with_ports:
            endpoints = member.get("endpoints") or {}
            row.append(" ".join(f"{name}={where}" for name, where in endpoints.items()))
        table.add_row(*row)
    return table


def human_duration(seconds: int) -> str:
    """3600 -> '1h', 1800 -> '30m', 5400 -> '1h30m', 90 -> '1m30s'."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{hours}h" if hours else "",
        f"{minutes}m" if minutes else "",
        f"{secs}s" if secs else "",
    ]
    return "".join(parts) or "0s"


def capabilities_tables(documents: Sequence[Capabilities]) -> list[Table]:
    """What `iri-gateway capabilities` prints: the resources; how each runtime treats a job's
    mounts, networks, GPUs and extra options; the hardware facts; the folders a user may use.

    Everything a job can be refused for on a resource is here, as in the JSON.
    """
    table = Table(title="Resources", show_lines=True)
    table.add_column("resource", no_wrap=True)
    for column in ("scheduler", "nodes", "GPUs / node", "queues", "runtimes", "MPI"):
        table.add_column(column)
    policies = Table(title="Container runtimes: what a job may ask of each", show_lines=True)
    policies.add_column("resource", no_wrap=True)
    for column in (
        "runtime",
        "mount sources",
        "networks",
        "GPU devices",
        "allowed extra options (regular expressions)",
    ):
        policies.add_column(column)
    facts = Table(title="Hardware facts (for flavour requirements)", show_lines=True)
    facts.add_column("resource", no_wrap=True)
    facts.add_column("facts")
    files = Table(title="Folders a job may use and a user may read", show_lines=True)
    files.add_column("resource", no_wrap=True)
    files.add_column("granted roots (besides the job folders the gateway makes)")
    for doc in documents:
        _add_text_row(table, _resource_row(doc))
        for runtime in doc.runtimes:
            _add_text_row(policies, [doc.resource, *_policy_row(runtime)])
        _add_text_row(
            facts,
            [
                doc.resource,
                "\n".join(
                    f"{name}: {_fact(value)}" + (" (detected)" if name in doc.detected else "")
                    for name, value in doc.hardware.items()
                ),
            ],
        )
        _add_text_row(files, [doc.resource, "\n".join(doc.file_roots) or "none: job folders only"])
    return [table, policies, facts, files]


def _add_text_row(table: Table, cells: list[str]) -> None:
    """A row of profile text, shown as written: `[kmg]` in a pattern is not rich markup."""
    table.add_row(*(escape(cell) for cell in cells))


def _resource_row(doc: Capabilities) -> list[str]:
    hardware = doc.hardware
    gpus = "-"
    if hardware["gpu_count"]:
        version = hardware.get("nvidia_cuda") or hardware.get("rocm")
        gpus = f"{hardware['gpu_count']} x {hardware['gpu_vendor']} {hardware['gpu_model']}"
        gpus += f" ({'CUDA' if 'nvidia_cuda' in hardware else 'ROCm'} {version})" if version else ""
        gpus += (
            "\nwithout a count: whole node"
            if doc.gpu_default_request == "whole-node"
            else "\nwithout a count: refused"
        )
    queues = "\n".join(
        f"{q.name}{' *' if q.default else ''}"
        + (f" <= {human_duration(q.max_walltime)}" if q.max_walltime else "")
        + (f", <= {q.max_nodes} nodes" if q.max_nodes else "")
        for q in doc.queues
    )
    runtimes = "\n".join(
        f"{r.name}{' *' if r.default else ''}"
        + (f"\n  gpu: {r.gpu}" if r.gpu else "")
        + (f"\n  mpi: {r.mpi}" if r.mpi else "")
        for r in doc.runtimes
    )
    mpi = f"{doc.mpi['flavour']} via {doc.mpi['launcher']}" if doc.mpi else "-"
    return [
        f"{doc.resource}\n{doc.facility}{' (example)' if doc.example_profile else ''}",
        doc.scheduler
        + (
            f"\ncluster jobs: <= {doc.cluster_jobs.max_roles} roles, "
            f"<= {doc.cluster_jobs.max_members} members"
            if doc.cluster_jobs.enabled
            else "\nno cluster jobs"
        ),
        f"{hardware['node_count']} x {hardware['cpu_cores']} cores, {hardware['memory_gib']:g} GiB",
        gpus,
        queues,
        runtimes or "none",
        mpi,
    ]


def _policy_row(runtime: RuntimeCapability) -> list[str]:
    mounts = "\n".join(runtime.mount_sources)
    if mounts:
        if not runtime.read_only_mounts:
            mounts += "\nread-write only (no read-only binds)"
        else:
            mounts += "\n" + ("read-write" if runtime.read_write_mounts else "read-only only")
    devices = "\n".join(runtime.cdi_devices) or "-"
    if runtime.oci_mode:
        devices += "\n(OCI mode: --oci)"
    return [
        runtime.name + (" *" if runtime.default else ""),
        mounts or "none",
        ", ".join(runtime.networks),
        devices,
        "\n".join(runtime.allowed_extra_options) or "none",
    ]


def _fact(value: object) -> str:
    if isinstance(value, list):
        return ", ".join(str(item) for item in value)
    return str(value).lower() if isinstance(value, bool) else str(value)
