"""Running the server: `serve`, and the bearer tokens of its tokens file (`token ...`).

What an operator runs on the gateway's host; the settings (`service.operations.settings`)
say where the data, the job store and the tokens are.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from iri_gateway import __version__
from iri_gateway.cli import consoles
from iri_gateway.cli.common import JsonOption, fail
from iri_gateway.errors import ProfileError

if TYPE_CHECKING:
    from pydantic import ValidationError

    from iri_gateway.service.accounts.auth import Access, TokenFile
    from iri_gateway.service.operations.settings import Settings

EXIT_USAGE = 2
"""The exit status of settings `serve` refuses before starting anything (as click's usage
errors)."""

FIRST_PROJECT = "demo"
"""The project of the admin token (user `admin`, admin role) the first `serve` creates (the
README's first example)."""


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
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Serving processes on the one socket, each a replica on the shared store "
            "(default: one per CPU core with PostgreSQL, one with SQLite, which serves one "
            "process; also IRI_GATEWAY_WORKERS).",
        ),
    ] = None,
    log_level: Annotated[
        str | None,
        typer.Option(
            help="debug, info (a line per request and background action), warning or error "
            "(also IRI_GATEWAY_LOG_LEVEL).",
        ),
    ] = None,
    log_format: Annotated[
        str | None,
        typer.Option(help="json (one object per line) or text (also IRI_GATEWAY_LOG_FORMAT)."),
    ] = None,
) -> None:
    """Run the gateway: the IRI API v2 on embedded defaults (SQLite, the `local` resource)."""
    from pydantic import ValidationError

    from iri_gateway.api.app import create_app
    from iri_gateway.api.status.metrics import MetricsTokenError, check_metrics_access
    from iri_gateway.cli import serving
    from iri_gateway.service.accounts.auth import TokenFile
    from iri_gateway.service.assembly import load_profiles
    from iri_gateway.service.operations import events
    from iri_gateway.service.operations.database import DatabaseError, display_url
    from iri_gateway.service.operations.events import event
    from iri_gateway.service.operations.log_setup import configure_logging
    from iri_gateway.service.operations.settings import Settings

    overrides: dict[str, object] = {}
    if profiles:
        overrides["profiles"] = profiles
    if data_dir is not None:
        overrides["data_dir"] = data_dir
    if database_url is not None:
        overrides["database_url"] = database_url
    if workers is not None:
        overrides["workers"] = workers
    if log_level is not None:
        overrides["log_level"] = log_level
    if log_format is not None:
        overrides["log_format"] = log_format
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as error:
        fail(f"invalid settings: {_settings_problems(error)}", EXIT_USAGE)
    configure_logging(settings.log_level, settings.log_format)
    count = serving.worker_count(settings)
    refused = serving.refusal(settings, count)
    if refused is not None:
        fail(refused, EXIT_USAGE)
    try:
        check_metrics_access(settings)  # once, before any worker: a scrape token file
        if count == 1:
            application = create_app(settings)
            resource_ids = application.state.engine.registry.ids()
        else:  # once, before the workers: the profile check and the migration
            resource_ids = load_profiles(settings).ids()
            serving.migrate(settings)
    except ProfileError as error:
        fail(f"invalid profile:\n{error}")
    except (DatabaseError, MetricsTokenError) as error:
        fail(str(error))
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
        from iri_gateway.cli.token_audit import record_token_change

        record_token_change(
            settings,
            operation="createToken",
            targets=["user admin; admin"],
            make_store=True,
        )
    resources = ", ".join(resource_ids)
    address = f"http://{host}:{port}"
    processes = "" if count == 1 else f"; {count} workers on {display_url(settings.store_url)}"
    which = (
        "the token above"
        if created
        else "your token (a new one: iri-gateway token USER --project PROJECT)"
    )
    # Log lines, not console prints: stderr is the log, one format from here on.
    event(
        logging.getLogger("iri_gateway.serve"),
        events.SERVE_STARTED,
        f"iri-gateway {__version__}: {address}/api/v2 (resources: {resources}; data: "
        f"{settings.data_dir}{processes}). Web console: open {address}/ in a browser and "
        f"sign in with {which}.",
        version=__version__,
        address=address,
        resources=list(resource_ids),
        data_dir=str(settings.data_dir),
        workers=count,
    )
    if count == 1:
        serving.serve_one(application, host, port)
        return
    raise typer.Exit(serving.serve_workers(settings, count, host, port))


def _settings_problems(error: ValidationError) -> str:
    """Pydantic's errors about settings in one line each: the setting (and its variable),
    what is wrong."""
    return "; ".join(
        f"{'.'.join(str(part) for part in problem['loc']) or 'settings'} "
        f"(IRI_GATEWAY_{str(problem['loc'][0]).upper() if problem['loc'] else '*'}): "
        f"{problem['msg']}"
        for problem in error.errors()
    )


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
DataDirOption = Annotated[
    Path | None, typer.Option("--data-dir", help="Data directory of the server.")
]


def _settings(data_dir: Path | None) -> Settings:
    from iri_gateway.service.operations.settings import Settings

    return Settings(**({"data_dir": data_dir} if data_dir else {}))  # type: ignore[arg-type]


def _tokens_file(data_dir: Path | None) -> TokenFile:
    from iri_gateway.service.accounts.auth import TokenFile

    return TokenFile(_settings(data_dir).tokens_path)


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
    read_only: Annotated[
        bool,
        typer.Option(
            "--read-only",
            help="A token that may only read (status, listings, files), refused every "
            "request that submits or changes.",
        ),
    ] = False,
    expires_in: Annotated[
        str | None,
        typer.Option(
            "--expires-in",
            help="How long the token is valid: 90s, 10m, 12h, 2d (default: the site's "
            "longest for its class, `read_token_lifetime` or `write_token_lifetime`; "
            "unset: no end).",
        ),
    ] = None,
    networks: Annotated[
        list[str] | None,
        typer.Option(
            "--from",
            help="A network (CIDR, e.g. 10.0.0.0/8) the token may be used from "
            "(repeatable); none: anywhere the site allows.",
        ),
    ] = None,
    data_dir: DataDirOption = None,
) -> None:
    """Create a bearer token for USER in the server's tokens file and print it (once)."""
    from iri_gateway.cli.durations import duration_seconds
    from iri_gateway.service.accounts.auth import TokenFileError

    access: Access = "read" if read_only else "write"
    try:
        asked = duration_seconds(expires_in) if expires_in is not None else None
        lifetime = _settings(data_dir).token_policy().lifetime(access, asked)
    except ValueError as error:
        fail(f"--expires-in: {error}")
    try:
        token = _tokens_file(data_dir).issue(
            user,
            project or [],
            admin=admin,
            access=access,
            lifetime=lifetime,
            networks=networks or [],
        )
    except TokenFileError as error:
        fail(str(error))
    sys.stdout.write(token + "\n")
    sys.stdout.flush()
    from iri_gateway.cli.token_audit import record_token_change

    role = ("; admin" if admin else "") + ("; read-only" if read_only else "")
    record_token_change(
        _settings(data_dir), operation="createToken", targets=[f"user {user}{role}"]
    )
    if not project and not read_only:
        consoles.err().print(
            f"note: the token grants no project, so {user!r} cannot submit "
            "jobs; give --project to grant one",
            markup=False,
        )
    if lifetime is not None:
        ends = datetime.fromtimestamp(time.time() + lifetime, UTC)
        consoles.err().print(
            f"note: the token expires at {ends:%Y-%m-%d %H:%M:%S} UTC", markup=False
        )


@token_app.command("list")
def token_list(data_dir: DataDirOption = None, as_json: JsonOption = False) -> None:
    """List the issued tokens: id, user, projects, admin role, creation time (never the
    tokens)."""
    from iri_gateway.service.accounts.auth import TokenFileError

    try:
        entries = _tokens_file(data_dir).entries()
    except TokenFileError as error:
        fail(str(error))
    if as_json:
        document = [
            {
                "id": e.id,
                "user": e.user,
                "projects": list(e.projects),
                "admin": e.admin,
                "access": e.access,
                "created": e.created,
                "expires": e.expires,
                "networks": list(e.networks),
            }
            for e in entries
        ]
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return
    from rich.table import Table

    table = Table(title=f"Tokens ({len(entries)})")
    # The ends and networks only when a token has them: a table wider than the terminal
    # would cut user names short.
    ends = any(entry.expires is not None for entry in entries)
    limited = any(entry.networks for entry in entries)
    columns = ["id", "user", "projects", "admin", "access", "created"]
    columns += ["expires"] * ends + ["from"] * limited
    for column in columns:
        table.add_column(column, no_wrap=True)
    for entry in entries:
        cells = [
            entry.id,
            entry.user,
            ", ".join(entry.projects) or "-",
            "admin" if entry.admin else "-",
            entry.access,
            _when(entry.created),
        ]
        cells += [_when(entry.expires)] * ends + [", ".join(entry.networks) or "-"] * limited
        table.add_row(*cells)
    consoles.out().print(table)


def _when(moment: float | None) -> str:
    """A POSIX time as UTC to the minute, `-` when there is none."""
    if moment is None:
        return "-"
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%d %H:%M UTC")


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
        fail(str(error))
    if not removed:
        fail("no token matched; `iri-gateway token list` shows the ids")
    from iri_gateway.cli.token_audit import record_token_change

    for entry in removed:
        sys.stdout.write(f"revoked {entry.id} ({entry.user})\n")
    sys.stdout.flush()
    record_token_change(
        _settings(data_dir),
        operation="revokeToken",
        targets=[f"user {entry.user}; token id {entry.id}" for entry in removed],
    )
