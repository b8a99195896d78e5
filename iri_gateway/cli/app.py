"""The `iri-gateway` command line (docs/design.md Contract 3): the commands, by audience.

This module only assembles them: the facility admin's offline commands (`admin`: render,
plan, capabilities, placement, profile, flavours, openapi), running the server (`server`:
serve, token), the scientist's commands against a server (`scientist`: submit, status,
jobs, ..., template) and the admin's audit log of a server (`audit_command`: audit). The
order they are added in is the order `--help` lists them.

Exit codes: 0 success; 2 the job cannot run (or is not a valid JobSpec), with one problem per
line on stderr, each naming its field path; 1 any other error (broken profile, unknown
resource, failed check). `--json` gives machine-readable output where a program reads it.

Scripts call the command line in loops, so a command imports only what it needs: building
the commands needs typer alone, and each command imports the gateway code (pydantic models,
profiles, Jinja, the server) and rich in its body. `tests/cli/test_cli_startup.py` keeps the
server's libraries out of `--help` and `render`; `benchmarks/bench_cli.py` times start-up.
"""

from __future__ import annotations

import sys

import typer

from iri_gateway import __version__
from iri_gateway.cli import admin, audit_command, server
from iri_gateway.cli.scientist import client_commands, job_array_commands, job_port_commands
from iri_gateway.cli.scientist.job_template_commands import template_app
from iri_gateway.cli.scientist.job_watch_commands import jobs_app

app = typer.Typer(
    help="HPC job-spec gateway: portable container JobSpecs -> Slurm/PBS batch scripts.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def version() -> None:
    """Print the gateway's version."""
    sys.stdout.write(f"iri-gateway {__version__}\n")


app.command()(admin.render)
app.command()(admin.plan)
app.command()(admin.capabilities)
app.command()(admin.placement)
app.command()(server.serve)
app.command("openapi")(admin.openapi_command)
app.command()(version)
client_commands.register(app)
# `jobs open`, `jobs forward`, `jobs elements` and `jobs cancel-elements` join `jobs` when
# their modules are imported (above).
assert job_port_commands.forward is not None
assert job_array_commands.elements is not None
app.add_typer(jobs_app, name="jobs")
app.add_typer(admin.profile_app, name="profile")
app.add_typer(admin.flavours_app, name="flavours")
app.add_typer(server.token_app, name="token")
app.add_typer(template_app, name="template")
app.command("audit")(audit_command.audit)


def main() -> None:
    """Console-script entry point."""
    app()
