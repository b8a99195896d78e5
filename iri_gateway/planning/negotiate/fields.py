"""Checks of free-text fields: environment names, values bound for directives, launchers."""

from __future__ import annotations

import re
from typing import Literal

from iri_gateway.errors import Problem
from iri_gateway.models.jobspec import MPI_LAUNCHERS, JobSpec
from iri_gateway.models.profile import Resource

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_SHELL_OWNED = frozenset(
    {
        "_",
        "UID",
        "EUID",
        "PPID",
        "BASHOPTS",
        "SHELLOPTS",
        "BASH_VERSINFO",
        "BASHPID",
        "BASH_ARGV0",
        "RANDOM",
        "SECONDS",
        "LINENO",
        "SRANDOM",
        "EPOCHSECONDS",
        "EPOCHREALTIME",
    }
)
_ATTRIBUTE_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*\Z")
LaunchMode = Literal["none", "parallel", "mpi"]


def check_environment(spec: JobSpec, problems: list[Problem]) -> None:
    """Variable names must be shell identifiers; any value is fine (it is quoted)."""
    for name in spec.environment:
        if not _ENV_NAME.match(name):
            problems.append(
                Problem(
                    f"environment.{name}",
                    "not a valid variable name; use letters, digits and '_', not starting with a "
                    "digit",
                )
            )
        elif name in _SHELL_OWNED:
            problems.append(
                Problem(
                    f"environment.{name}",
                    "bash owns this variable (read-only or set by bash "
                    "itself), so the job could not receive the value",
                )
            )


def directive_fields(spec: JobSpec) -> dict[str, str]:
    """JobSpec values that the scheduler reads from directive lines, by JSON path."""
    fields = {
        "name": spec.name,
        "directory": spec.directory,
        "stdout_path": spec.stdout_path,
        "stderr_path": spec.stderr_path,
        "stdin_path": spec.stdin_path,
    }
    if spec.attributes is not None:
        fields["attributes.queue_name"] = spec.attributes.queue_name
        fields["attributes.account"] = spec.attributes.account
        fields["attributes.reservation_id"] = spec.attributes.reservation_id
        for key, value in spec.attributes.custom_attributes.items():
            fields[f"attributes.custom_attributes.{key}"] = value
    return {path: value for path, value in fields.items() if value is not None}


def check_directive_values(spec: JobSpec, resource: Resource, problems: list[Problem]) -> None:
    """A value the scheduler would read otherwise than meant, or that would end its directive
    line and start a shell command, is refused as its plug-in's directive rules say."""
    facts = resource.scheduler.facts
    for path, value in directive_fields(spec).items():
        written = value
        if path in ("stdout_path", "stderr_path"):
            written = facts.directive_output_path(spec.directory, value)
        reason = facts.directive_refusal(path, written)
        if reason is not None and written != value:
            reason += f" (the directive carries {written!r}: the path joined to the directory)"
        if reason is not None:
            problems.append(Problem(path, reason))


def check_nul(spec: JobSpec, problems: list[Problem]) -> None:
    """No argv, environment or script can carry a NUL byte: refuse it wherever it is."""
    if "\\u0000" not in spec.model_dump_json():  # one fast pass; locate only when present
        return
    for path, value in _strings(spec.model_dump(mode="python", exclude_none=True), ""):
        if "\x00" in value:
            problems.append(Problem(path or "(document)", "contains a NUL character"))


def _strings(node: object, path: str) -> list[tuple[str, str]]:
    """Every string in a dumped JobSpec (keys too), with its JSON path."""
    if isinstance(node, str):
        return [(path, node)]
    found: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            child = f"{path}.{key}" if path else str(key)
            found.append((child, str(key)))
            found.extend(_strings(value, child))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(_strings(value, f"{path}[{index}]"))
    return found


def check_custom_attributes(spec: JobSpec, resource: Resource, problems: list[Problem]) -> None:
    """Custom scheduler attributes pass only when the site allows that key."""
    if spec.attributes is None:
        return
    allowed = resource.scheduler.allowed_custom_attributes
    for key in spec.attributes.custom_attributes:
        where = f"attributes.custom_attributes.{key}"
        if not _ATTRIBUTE_KEY.match(key):
            problems.append(Problem(where, "not an option name (letters, digits, '-', '_')"))
        elif key not in allowed:
            problems.append(
                Problem(
                    where,
                    f"{resource.scheduler.kind} option {key!r} is not allowed here",
                    ", ".join(allowed) or "no custom attributes",
                )
            )


def launch_mode(
    spec: JobSpec,
    resource: Resource,
    processes: int,
    problems: list[Problem],
    warnings: list[str],
) -> LaunchMode:
    """How processes start: directly, as N copies through the launcher, or as MPI ranks."""
    launcher = spec.launcher
    if launcher is None:
        return "parallel" if processes > 1 else "none"
    if launcher == "single":
        if processes > 1:
            warnings.append(
                f"launcher 'single' starts one process; the other {processes - 1} of "
                "process_count only reserve resources"
            )
        return "none"
    if launcher == "multiple":
        return "parallel"
    if launcher in MPI_LAUNCHERS:
        mpi = resource.mpi
        if mpi is None:
            problems.append(
                Problem("launcher", f"{resource.id} has no MPI launcher", "single, multiple")
            )
            return "none"
        if launcher not in mpi.accepts:
            problems.append(
                Problem(
                    "launcher",
                    f"{launcher!r} is not used on {resource.id}",
                    ", ".join(["single", "multiple", *mpi.accepts]),
                )
            )
            return "none"
        if launcher != mpi.launcher:
            warnings.append(f"launcher {launcher!r} runs as the site's {mpi.launcher!r}")
        return "mpi"
    offered = ["single", "multiple", *(resource.mpi.accepts if resource.mpi else [])]
    problems.append(Problem("launcher", f"unknown launcher {launcher!r}", ", ".join(offered)))
    return "none"
