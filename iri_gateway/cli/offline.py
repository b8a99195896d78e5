"""Reading what the offline commands work on: profile files and JobSpec files, on this machine.

`render`, `plan`, `capabilities`, `placement`, `flavours import` and `profile check` need no
server: they load the profiles named (or the shipped ones) and the JobSpec given, and fail
with the exit codes of `common`. Each imports the gateway code it needs when it runs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from iri_gateway.cli import consoles
from iri_gateway.cli.common import EXIT_CANNOT_RUN, fail
from iri_gateway.errors import GatewayError, InvalidJobSpecError, ProfileError

if TYPE_CHECKING:
    from iri_gateway.models.jobspec import JobSpec
    from iri_gateway.planning.job_templates import Expanded
    from iri_gateway.profiles.loading import ProfileRegistry

ProfileOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--profile",
        "-p",
        help="Profile file or folder of *.yaml (repeatable); default: the shipped profiles.",
    ),
]
JobArgument = Annotated[str, typer.Argument(help="JobSpec JSON file, or '-' for stdin.")]
ResourceOption = Annotated[
    str | None,
    typer.Option("--resource", "-r", help="Resource id; may be left out if only one is loaded."),
]


def load_registry(
    profiles: list[Path] | None, resource: str | None = None, measure: bool = True
) -> ProfileRegistry:
    """The profiles named, else the shipped ones, whose parsed trees the user's cache keeps;
    with `measure`, resources that ask for it (`nodes.detect`) measured on this machine (only
    `resource` when one is named), notes on stderr."""
    from iri_gateway.profiles.loading import ProfileRegistry
    from iri_gateway.profiles.local_machine import registry_with_machine
    from iri_gateway.profiles.tree_cache import ProfileTreeCache

    try:
        if profiles:
            registry = ProfileRegistry.from_paths(profiles)
        else:
            registry = ProfileRegistry.builtin(ProfileTreeCache.for_user())
    except ProfileError as error:
        fail(f"invalid profile:\n{error}")
    if not measure:
        return registry
    registry, notes = registry_with_machine(registry, only=resource)
    for note in notes:
        consoles.err().print(f"warning: {note}", markup=False)
    return registry


def read_job(job: str) -> JobSpec:
    from iri_gateway.planning.jobspec_io import load_jobspec_text

    try:
        text = sys.stdin.read() if job == "-" else Path(job).read_text(encoding="utf-8")
    except OSError as error:
        fail(f"cannot read {job}: {error.strerror}")
    try:
        return load_jobspec_text(text)
    except InvalidJobSpecError as error:
        fail("\n".join(str(p) for p in error.problems), EXIT_CANNOT_RUN)


def expand_template(registry: ProfileRegistry, spec: JobSpec) -> Expanded:
    """The job with its template applied: offline, only the profiles' templates exist (a
    user's own are on the server: `remote-plan`)."""
    from iri_gateway.planning.job_templates import Expanded, expand, shipped_templates

    if spec.template is None:
        return Expanded(spec, None)
    try:
        return expand(spec, shipped_templates(registry))
    except InvalidJobSpecError as error:
        fail("\n".join(str(p) for p in error.problems), EXIT_CANNOT_RUN)
    except GatewayError as error:
        fail(str(error))


def pick_resource(registry: ProfileRegistry, resource: str | None) -> str:
    if resource is not None:
        return resource
    if len(registry) == 1:
        return registry.ids()[0]
    fail(f"name a resource with --resource; loaded: {', '.join(registry.ids())}")
