"""The facility admin's commands: a profile checked, jobs rendered and placed against it.

`render`, `plan`, `capabilities` and `placement` answer offline, from profile files, what the
server would (a facility admin trying a profile, a scientist trying a job before sending
it); `profile check` renders sample jobs on every resource and runtime and lints them,
`profile schema` and `openapi` print the shipped documents, `flavours import` turns an app
manifest into a JobSpec's flavours. No server is started or called.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from iri_gateway.cli import consoles
from iri_gateway.cli.common import EXIT_CANNOT_RUN, EXIT_ERROR, JsonOption, fail
from iri_gateway.cli.offline import (
    JobArgument,
    ProfileOption,
    ResourceOption,
    expand_template,
    load_registry,
    pick_resource,
    read_job,
)
from iri_gateway.errors import GatewayError, InvalidJobSpecError, JobRejectedError, ManifestError

if TYPE_CHECKING:
    from iri_gateway.profiles.account_check import AccountRow, ProjectRow

profile_app = typer.Typer(help="Work with facility profiles.", no_args_is_help=True)
flavours_app = typer.Typer(help="Work with image flavours of an app.", no_args_is_help=True)


def render(
    job: JobArgument,
    profile: ProfileOption = None,
    resource: ResourceOption = None,
) -> None:
    """Print the batch script that would be submitted for JOB on a resource."""
    from iri_gateway.planning.planner import make_plan

    registry = load_registry(profile, resource)
    spec = expand_template(registry, read_job(job)).spec
    try:
        plan = make_plan(
            spec, registry.get(pick_resource(registry, resource)), registry.known_facts
        )
    except JobRejectedError as error:
        fail("\n".join(str(p) for p in error.problems), EXIT_CANNOT_RUN)
    except GatewayError as error:
        fail(str(error))
    for warning in plan.warnings:
        consoles.err().print(f"warning: {warning}", markup=False)
    sys.stdout.write(plan.script)


def plan(
    job: JobArgument,
    profile: ProfileOption = None,
    resource: ResourceOption = None,
) -> None:
    """Dry run as JSON: chosen runtime, bindings, warnings and the exact script.

    When the job cannot run, the JSON lists every problem and the exit code is 2.
    """
    from iri_gateway.planning.job_templates import with_template
    from iri_gateway.planning.planner import make_plan

    registry = load_registry(profile, resource)
    expanded = expand_template(registry, read_job(job))
    resource_id = pick_resource(registry, resource)
    try:
        result = with_template(
            make_plan(expanded.spec, registry.get(resource_id), registry.known_facts),
            expanded.template,
        )
    except JobRejectedError as error:
        document = {
            "resource": resource_id,
            "problems": [
                {"name": p.field, "reason": p.reason, "offered": p.offered} for p in error.problems
            ],
        }
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        raise typer.Exit(EXIT_CANNOT_RUN) from None
    except GatewayError as error:
        fail(str(error))
    sys.stdout.write(result.model_dump_json(indent=2) + "\n")


def capabilities(
    profile: ProfileOption = None,
    resource: ResourceOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show every resource of the loaded profiles: hardware, queues, runtimes, MPI."""
    from iri_gateway.cli.views import capabilities_tables
    from iri_gateway.profiles.capabilities import capabilities as capabilities_of

    registry = load_registry(profile, resource)
    try:
        chosen = [registry.get(resource)] if resource else list(registry)
    except GatewayError as error:
        fail(str(error))
    documents = [capabilities_of(loaded) for loaded in chosen]
    if as_json:
        sys.stdout.write(json.dumps([d.model_dump() for d in documents], indent=2) + "\n")
        return
    out = consoles.out()
    for number, table in enumerate(capabilities_tables(documents)):
        out.print(table)
        if number == 0:
            out.print("* default")


def placement(
    job: JobArgument,
    profile: ProfileOption = None,
    as_json: JsonOption = False,
) -> None:
    """Where could JOB run? Every resource of the loaded profiles ranked: runnable ones first,
    best image flavour first, with the reasons for the others.

    Exit 0 when at least one resource can run the job, 2 when none can.
    """
    from iri_gateway.planning.placement import place

    registry = load_registry(profile)
    spec = expand_template(registry, read_job(job)).spec
    try:
        ranked = place(spec, registry)
    except InvalidJobSpecError as error:
        fail("\n".join(str(p) for p in error.problems), EXIT_CANNOT_RUN)
    if as_json:
        sys.stdout.write(json.dumps([p.model_dump(mode="json") for p in ranked], indent=2) + "\n")
    else:
        from iri_gateway.cli.views import placement_table

        consoles.out().print(placement_table(ranked))
    if not any(p.runnable for p in ranked):
        raise typer.Exit(EXIT_CANNOT_RUN)


@flavours_app.command("import")
def flavours_import(
    manifest: Annotated[Path, typer.Argument(help="App manifest (YAML) of flavours.")],
    job: Annotated[
        str | None,
        typer.Option(
            "--job",
            help="JobSpec JSON file (or '-') to put the flavours into; "
            "its container.flavours and container.app are replaced.",
        ),
    ] = None,
    app_name: Annotated[
        str | None,
        typer.Option("--app", help="The app to import when the manifest lists several."),
    ] = None,
) -> None:
    """Convert an app manifest's flavours into a JobSpec `container.flavours` list (JSON).

    With --job, print that JobSpec with the flavours (and the app's name and version, as
    `container.app`) in it instead. Exit 2 when the manifest or the resulting JobSpec is
    invalid, each fault on stderr with its file and line.
    """
    from iri_gateway.planning.jobspec_io import parse_jobspec
    from iri_gateway.profiles.flavour_manifest import import_manifest

    try:
        imported = import_manifest(manifest, app_name)
    except ManifestError as error:
        fail(str(error), EXIT_CANNOT_RUN)
    listed = [f.model_dump(mode="json", exclude_defaults=True) for f in imported.flavours]
    if job is None:
        sys.stdout.write(json.dumps(listed, indent=2) + "\n")
        return
    spec = read_job(job)
    document = spec.model_dump(mode="json", exclude_unset=True)
    container = {**document.get("container", {}), "flavours": listed}
    container.pop("app", None)
    if imported.app is not None:
        container["app"] = imported.app.model_dump(mode="json", exclude_none=True)
    document["container"] = container
    try:
        merged = parse_jobspec(document)
    except InvalidJobSpecError as error:
        fail("\n".join(str(p) for p in error.problems), EXIT_CANNOT_RUN)
    sys.stdout.write(merged.model_dump_json(indent=2, exclude_unset=True) + "\n")


@profile_app.command("check")
def profile_check(
    files: Annotated[list[Path], typer.Argument(help="Profile files or folders.")],
    no_shellcheck: Annotated[
        bool, typer.Option("--no-shellcheck", help="Skip shellcheck (bash -n still runs).")
    ] = False,
    identity: Annotated[
        list[Path] | None,
        typer.Option(
            "--identity",
            help="A sample identity: a JSON file of its claims (a token's payload). Shows "
            "the account each resource would run its work as, and which mapping decided, "
            "and the projects each resource's project rules grant it, and which rule. "
            "Repeatable.",
        ),
    ] = None,
    username_claim: Annotated[
        str,
        typer.Option(
            "--username-claim",
            help="The claim of an identity that is its gateway user name (as the "
            "jwt_username_claim setting).",
        ),
    ] = "sub",
    as_json: JsonOption = False,
) -> None:
    """Validate profiles, render sample jobs on every resource and runtime, lint the scripts;
    with --identity, show which account each resource maps each sample identity to, and the
    projects its project rules grant."""
    from iri_gateway.profiles.account_check import (
        IdentityFileError,
        account_rows,
        project_rows,
        read_identity,
    )
    from iri_gateway.profiles.check import check_scripts, find_shellcheck, run_matrix

    registry = load_registry(files, measure=False)
    try:
        identities = [read_identity(path, username_claim) for path in identity or []]
    except IdentityFileError as error:
        fail(f"--identity {error}")
    accounts = account_rows(registry, identities)
    projects = project_rows(registry, identities)
    shellcheck = None
    if not no_shellcheck:
        shellcheck = find_shellcheck()
        if shellcheck is None:
            fail(
                "shellcheck is not installed (Debian: apt-get install shellcheck); "
                "install it or pass --no-shellcheck"
            )
    rows = run_matrix(registry)
    check_scripts(rows, shellcheck)
    failed = [row for row in rows if row.outcome == "FAIL"]
    if as_json:
        document = [
            {
                "resource": r.resource,
                "runtime": r.runtime,
                "sample": r.sample,
                "outcome": r.outcome,
                "detail": r.detail,
            }
            for r in rows
        ]
        if identity:
            shown = {
                "samples": document,
                "accounts": [asdict(a) for a in accounts],
                "projects": [asdict(p) for p in projects],
            }
            sys.stdout.write(json.dumps(shown, indent=2) + "\n")
        else:
            sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        from rich.table import Table

        table = Table(title=f"Profile check ({len(registry)} resources)")
        for column in ("resource", "runtime", "sample", "result"):
            table.add_column(column, no_wrap=True)
        table.add_column("detail")
        styles = {"ok": "green", "unsupported": "yellow", "FAIL": "bold red"}
        for row in rows:
            table.add_row(
                row.resource,
                row.runtime,
                row.sample,
                f"[{styles[row.outcome]}]{row.outcome}[/]",
                row.detail,
            )
        consoles.out().print(table)
        linted = "bash -n and shellcheck -S warning" if shellcheck else "bash -n only"
        consoles.out().print(f"{len(rows) - len(failed)} of {len(rows)} samples passed ({linted}).")
        if accounts:
            _print_accounts(accounts, projects)
    if failed:
        raise typer.Exit(EXIT_ERROR)


def _print_identity_table(
    title: str, columns: tuple[str, str], rows: list[tuple[str, str, str, str]]
) -> None:
    """A table of `profile check --identity`: per identity and resource, what was found
    (`columns[0]`, shown as markup) and what decided it (`columns[1]`, shown as text)."""
    from rich.table import Table

    table = Table(title=title)
    for column in ("identity", "resource", columns[0]):
        table.add_column(column, no_wrap=True)
    table.add_column(columns[1])
    for identity, resource, found, how in rows:
        table.add_row(identity, resource, found, escape(how))
    consoles.out().print(table)


def _print_accounts(accounts: list[AccountRow], projects: list[ProjectRow]) -> None:
    def account(row: AccountRow) -> str:
        return "[bold red]none[/]" if row.account is None else (row.account or "(gateway's)")

    _print_identity_table(
        "Accounts of the sample identities",
        ("account", "decided by"),
        [(row.identity, row.resource, account(row), row.how) for row in accounts],
    )
    _print_identity_table(
        "Projects the resources' rules grant (besides the token's own)",
        ("project", "granted by"),
        [
            (row.identity, row.resource, row.project or "[yellow]none[/]", row.how)
            for row in projects
        ],
    )


@profile_app.command("schema")
def profile_schema() -> None:
    """Print the JSON Schema of facility profiles (shipped as facility_profiles/schema.json)."""
    from iri_gateway.profiles.loading import profile_json_schema

    sys.stdout.write(profile_json_schema())


def openapi_command() -> None:
    """Print the gateway's OpenAPI document (shipped as openapi/openapi.json)."""
    from iri_gateway.api.export import openapi_document

    sys.stdout.write(openapi_document())
