"""The `iri-gateway` command line (docs/design.md Contract 3).

Exit codes: 0 success; 2 the job cannot run (or is not a valid JobSpec), with one problem per
line on stderr, each naming its field path; 1 any other error (broken profile, unknown
resource, failed check). `--json` gives machine-readable output where a program reads it.

Scripts call the command line in loops, so a command imports only what it needs: building
the commands needs typer alone, and each command imports the gateway code (pydantic models,
profiles, Jinja, the server) and rich in its body. `tests/test_cli_startup.py` keeps the
server's libraries out of `--help` and `render`; `benchmarks/bench_cli.py` times start-up.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

from iri_gateway import __version__
from iri_gateway.cli import consoles
from iri_gateway.errors import (
    GatewayError,
    InvalidJobSpecError,
    JobRejectedError,
    ManifestError,
    ProfileError,
)

if TYPE_CHECKING:
    from iri_gateway.models.jobspec import JobSpec
    from iri_gateway.planning.job_templates import Expanded
    from iri_gateway.profiles.loading import ProfileRegistry
    from iri_gateway.service.accounts.auth import TokenFile

EXIT_ERROR = 1
EXIT_CANNOT_RUN = 2
FIRST_PROJECT = "demo"
"""The project of the admin token (user `admin`, admin role) the first `serve` creates (the
README's first example)."""

app = typer.Typer(
    help="HPC job-spec gateway: portable container JobSpecs -> Slurm/PBS batch scripts.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
profile_app = typer.Typer(help="Work with facility profiles.", no_args_is_help=True)
app.add_typer(profile_app, name="profile")
flavours_app = typer.Typer(help="Work with image flavours of an app.", no_args_is_help=True)
app.add_typer(flavours_app, name="flavours")

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
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    consoles.err().print(message, markup=False)
    raise typer.Exit(code)


def _registry(
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
        _fail(f"invalid profile:\n{error}")
    if not measure:
        return registry
    registry, notes = registry_with_machine(registry, only=resource)
    for note in notes:
        consoles.err().print(f"warning: {note}", markup=False)
    return registry


def _read_job(job: str) -> JobSpec:
    from iri_gateway.planning.jobspec_io import load_jobspec_text

    try:
        text = sys.stdin.read() if job == "-" else Path(job).read_text(encoding="utf-8")
    except OSError as error:
        _fail(f"cannot read {job}: {error.strerror}")
    try:
        return load_jobspec_text(text)
    except InvalidJobSpecError as error:
        _fail("\n".join(str(p) for p in error.problems), EXIT_CANNOT_RUN)


def _expanded(registry: ProfileRegistry, spec: JobSpec) -> Expanded:
    """The job with its template applied: offline, only the profiles' templates exist (a
    user's own are on the server: `remote-plan`)."""
    from iri_gateway.planning.job_templates import Expanded, expand, shipped_templates

    if spec.template is None:
        return Expanded(spec, None)
    try:
        return expand(spec, shipped_templates(registry))
    except InvalidJobSpecError as error:
        _fail("\n".join(str(p) for p in error.problems), EXIT_CANNOT_RUN)
    except GatewayError as error:
        _fail(str(error))


def _pick_resource(registry: ProfileRegistry, resource: str | None) -> str:
    if resource is not None:
        return resource
    if len(registry) == 1:
        return registry.ids()[0]
    _fail(f"name a resource with --resource; loaded: {', '.join(registry.ids())}")


@app.command()
def render(
    job: JobArgument,
    profile: ProfileOption = None,
    resource: ResourceOption = None,
) -> None:
    """Print the batch script that would be submitted for JOB on a resource."""
    from iri_gateway.planning.planner import make_plan

    registry = _registry(profile, resource)
    spec = _expanded(registry, _read_job(job)).spec
    try:
        plan = make_plan(
            spec, registry.get(_pick_resource(registry, resource)), registry.known_facts
        )
    except JobRejectedError as error:
        _fail("\n".join(str(p) for p in error.problems), EXIT_CANNOT_RUN)
    except GatewayError as error:
        _fail(str(error))
    for warning in plan.warnings:
        consoles.err().print(f"warning: {warning}", markup=False)
    sys.stdout.write(plan.script)


@app.command()
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

    registry = _registry(profile, resource)
    expanded = _expanded(registry, _read_job(job))
    resource_id = _pick_resource(registry, resource)
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
        _fail(str(error))
    sys.stdout.write(result.model_dump_json(indent=2) + "\n")


@app.command()
def capabilities(
    profile: ProfileOption = None,
    resource: ResourceOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show every resource of the loaded profiles: hardware, queues, runtimes, MPI."""
    from iri_gateway.cli.views import capabilities_tables
    from iri_gateway.profiles.capabilities import capabilities as capabilities_of

    registry = _registry(profile, resource)
    try:
        chosen = [registry.get(resource)] if resource else list(registry)
    except GatewayError as error:
        _fail(str(error))
    documents = [capabilities_of(loaded) for loaded in chosen]
    if as_json:
        sys.stdout.write(json.dumps([d.model_dump() for d in documents], indent=2) + "\n")
        return
    out = consoles.out()
    for number, table in enumerate(capabilities_tables(documents)):
        out.print(table)
        if number == 0:
            out.print("* default")


@app.command()
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

    registry = _registry(profile)
    spec = _expanded(registry, _read_job(job)).spec
    try:
        ranked = place(spec, registry)
    except InvalidJobSpecError as error:
        _fail("\n".join(str(p) for p in error.problems), EXIT_CANNOT_RUN)
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
        _fail(str(error), EXIT_CANNOT_RUN)
    listed = [f.model_dump(mode="json", exclude_defaults=True) for f in imported.flavours]
    if job is None:
        sys.stdout.write(json.dumps(listed, indent=2) + "\n")
        return
    spec = _read_job(job)
    document = spec.model_dump(mode="json", exclude_unset=True)
    container = {**document.get("container", {}), "flavours": listed}
    container.pop("app", None)
    if imported.app is not None:
        container["app"] = imported.app.model_dump(mode="json", exclude_none=True)
    document["container"] = container
    try:
        merged = parse_jobspec(document)
    except InvalidJobSpecError as error:
        _fail("\n".join(str(p) for p in error.problems), EXIT_CANNOT_RUN)
    sys.stdout.write(merged.model_dump_json(indent=2, exclude_unset=True) + "\n")


@profile_app.command("check")
def profile_check(
    files: Annotated[list[Path], typer.Argument(help="Profile files or folders.")],
    no_shellcheck: Annotated[
        bool, typer.Option("--no-shellcheck", help="Skip shellcheck (bash -n still runs).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Validate profiles, render sample jobs on every resource and runtime, lint the scripts."""
    from iri_gateway.profiles.check import check_scripts, find_shellcheck, run_matrix

    registry = _registry(files, measure=False)
    shellcheck = None
    if not no_shellcheck:
        shellcheck = find_shellcheck()
        if shellcheck is None:
            _fail(
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
    if failed:
        raise typer.Exit(EXIT_ERROR)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    profiles: Annotated[
        list[Path] | None,
        typer.Option("--profiles", help="Profile files or folders (default: the local one)."),
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Store, tokens and job folders (default: XDG data dir).")
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option(
            help="Job store URL, e.g. postgresql://USER:PASSWORD@HOST/DB (default: "
            "SQLite in the data dir; also IRI_GATEWAY_DATABASE_URL)."
        ),
    ] = None,
) -> None:
    """Run the gateway: the IRI API v2 on embedded defaults (SQLite, the `local` resource)."""
    import uvicorn

    from iri_gateway.api.app import create_app
    from iri_gateway.service.accounts.auth import TokenFile
    from iri_gateway.service.operations.database import DatabaseError
    from iri_gateway.service.operations.settings import Settings

    overrides: dict[str, object] = {}
    if profiles:
        overrides["profiles"] = profiles
    if data_dir is not None:
        overrides["data_dir"] = data_dir
    if database_url is not None:
        overrides["database_url"] = database_url
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
        application = create_app(settings)
    except ProfileError as error:
        _fail(f"invalid profile:\n{error}")
    except DatabaseError as error:
        _fail(str(error))
    created = not settings.tokens_path.exists()
    if created:
        token = TokenFile(settings.tokens_path).issue("admin", [FIRST_PROJECT], admin=True)
        consoles.err().print(
            f"Created {settings.tokens_path} with an admin token for user 'admin' and project "
            f"{FIRST_PROJECT!r} (shown once):\n  {token}\nSend it as 'Authorization: "
            f"Bearer TOKEN' with 'X-IRI-Facility-Project: {FIRST_PROJECT}'; more users "
            "and projects: iri-gateway token USER --project PROJECT",
            markup=False,
        )
    resources = ", ".join(application.state.engine.registry.ids())
    address = f"http://{host}:{port}"
    consoles.err().print(
        f"iri-gateway {__version__}: {address}/api/v2 (resources: "
        f"{resources}; data: {settings.data_dir})",
        markup=False,
    )
    which = (
        "the token above"
        if created
        else "your token (a new one: iri-gateway token USER --project PROJECT)"
    )
    consoles.err().print(
        f"Web console: open {address}/ in a browser and sign in with {which}.", markup=False
    )
    uvicorn.run(application, host=host, port=port, log_level="warning")


class _TokenGroup(TyperGroup):
    """`iri-gateway token USER ...` is `iri-gateway token create USER ...` (the older form)."""

    # `ctx` is typer's bundled click Context, which typer does not export under a public name.
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["create", *args]
        return super().parse_args(ctx, args)


token_app = typer.Typer(
    cls=_TokenGroup,
    no_args_is_help=True,
    help="Issue, list and revoke the bearer tokens of the server's tokens file; changes take "
    "effect at the server's next request. `token USER --project P` is `token create USER "
    "--project P` (a user named like a subcommand needs `create`).",
)
app.add_typer(token_app, name="token")
DataDirOption = Annotated[
    Path | None, typer.Option("--data-dir", help="Data directory of the server.")
]


def _tokens_file(data_dir: Path | None) -> TokenFile:
    from iri_gateway.service.accounts.auth import TokenFile
    from iri_gateway.service.operations.settings import Settings

    settings = Settings(**({"data_dir": data_dir} if data_dir else {}))  # type: ignore[arg-type]
    return TokenFile(settings.tokens_path)


@token_app.command("create")
def token_create(
    user: Annotated[str, typer.Argument(help="Gateway user name the token stands for.")],
    project: Annotated[
        list[str] | None,
        typer.Option(
            "--project",
            help="Project the user may charge (repeatable); a token "
            "without projects may charge none.",
        ),
    ] = None,
    admin: Annotated[
        bool,
        typer.Option(
            "--admin",
            help="Give the token the facility admin role (needed "
            "to check profiles, e.g. on the console's Profiles page).",
        ),
    ] = False,
    data_dir: DataDirOption = None,
) -> None:
    """Create a bearer token for USER in the server's tokens file and print it (once)."""
    from iri_gateway.service.accounts.auth import TokenFileError

    try:
        token = _tokens_file(data_dir).issue(user, project or [], admin=admin)
    except TokenFileError as error:
        _fail(str(error))
    sys.stdout.write(token + "\n")
    if not project:
        consoles.err().print(
            f"note: the token grants no project, so {user!r} cannot submit "
            "jobs; give --project to grant one",
            markup=False,
        )


@token_app.command("list")
def token_list(data_dir: DataDirOption = None, as_json: JsonOption = False) -> None:
    """List the issued tokens: id, user, projects, admin role, creation time (never the
    tokens)."""
    from iri_gateway.service.accounts.auth import TokenFileError

    try:
        entries = _tokens_file(data_dir).entries()
    except TokenFileError as error:
        _fail(str(error))
    if as_json:
        document = [
            {
                "id": e.id,
                "user": e.user,
                "projects": list(e.projects),
                "admin": e.admin,
                "created": e.created,
            }
            for e in entries
        ]
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return
    from rich.table import Table

    table = Table(title=f"Tokens ({len(entries)})")
    for column in ("id", "user", "projects", "admin", "created"):
        table.add_column(column, no_wrap=True)
    for entry in entries:
        created = (
            "-"
            if entry.created is None
            else datetime.fromtimestamp(entry.created, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        )
        table.add_row(
            entry.id,
            entry.user,
            ", ".join(entry.projects) or "-",
            "admin" if entry.admin else "-",
            created,
        )
    consoles.out().print(table)


@token_app.command("revoke")
def token_revoke(
    token_or_id: Annotated[
        str | None,
        typer.Argument(
            help="The token itself, or its id from `token list` (a "
            "token beginning with '-' goes after `--`)."
        ),
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", help="Revoke every token of this user.")
    ] = None,
    data_dir: DataDirOption = None,
) -> None:
    """Revoke a token (by the token or its id), or every token of a user (--user).

    Exit 1 when nothing matched.
    """
    from iri_gateway.service.accounts.auth import TokenFileError

    try:
        removed = _tokens_file(data_dir).revoke(token_or_id=token_or_id, user=user)
    except TokenFileError as error:
        _fail(str(error))
    if not removed:
        _fail("no token matched; `iri-gateway token list` shows the ids")
    for entry in removed:
        sys.stdout.write(f"revoked {entry.id} ({entry.user})\n")


@profile_app.command("schema")
def profile_schema() -> None:
    """Print the JSON Schema of facility profiles (shipped as facility_profiles/schema.json)."""
    from iri_gateway.profiles.loading import profile_json_schema

    sys.stdout.write(profile_json_schema())


@app.command("openapi")
def openapi_command() -> None:
    """Print the gateway's OpenAPI document (shipped as openapi/openapi.json)."""
    from iri_gateway.api.openapi.export import openapi_document

    sys.stdout.write(openapi_document())


@app.command()
def version() -> None:
    """Print the gateway's version."""
    sys.stdout.write(f"iri-gateway {__version__}\n")


from iri_gateway.cli.client_commands import register  # noqa: E402

register(app)
from iri_gateway.cli.job_template_commands import template_app  # noqa: E402

app.add_typer(template_app, name="template")


def main() -> None:
    """Console-script entry point."""
    app()
