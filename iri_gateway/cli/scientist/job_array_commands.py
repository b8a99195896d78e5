"""`iri-gateway jobs elements` and `jobs cancel-elements`: an array job's elements.

`jobs elements JOB -r R [--state failed] [--offset N] [--limit N] [--json]` lists the
elements with their states and exit codes (a page: the total is said when more match);
`jobs cancel-elements JOB INDICES -r R` cancels those elements (`"0-9,15"`; the others run
on). `iri-gateway cancel JOB` ends the whole array. Exit codes as the other client
commands: 0 done, 2 bad input, 1 any other refusal, with the gateway's words.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from iri_gateway.cli import consoles
from iri_gateway.cli.scientist import client_commands as common
from iri_gateway.cli.scientist.job_watch_commands import jobs_app
from iri_gateway.client.models import DEFAULT_URL
from iri_gateway.models.job import JobState

StateOption = Annotated[
    JobState | None, typer.Option("--state", help="Only the elements in this state.")
]


@jobs_app.command("elements")
def elements(
    job_id: common.JobIdArgument,
    resource: common.ResourceOption,
    state: StateOption = None,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Skip this many.")] = 0,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=1000, help="Show at most this many.")
    ] = 100,
    as_json: common.JsonOption = False,
    server: common.ServerOption = DEFAULT_URL,
    token: common.TokenOption = None,
) -> None:
    """List an array job's elements with their states and exit codes."""
    with common._gateway(server, token) as client:
        page = client.job_elements(
            resource,
            job_id,
            offset=offset,
            limit=limit,
            state=state.value if state is not None else None,
        )
    if as_json:
        document = {
            "total": page.total,
            "offset": page.offset,
            "elements": [
                {
                    "index": e.index,
                    "state": e.state.value,
                    "native_state": e.native_state,
                    "exit_code": e.exit_code,
                }
                for e in page.elements
            ],
        }
        sys.stdout.write(json.dumps(document) + "\n")
        return
    from rich.table import Table

    which = f" {state.value}" if state is not None else ""
    table = Table(title=f"{page.total}{which} elements of {job_id}")
    for column in ("index", "state", "exit", "scheduler's word"):
        table.add_column(column, no_wrap=True)
    for element in page.elements:
        code = "-" if element.exit_code is None else str(element.exit_code)
        table.add_row(str(element.index), element.state.value, code, element.native_state)
    consoles.out().print(table)
    shown = page.offset + len(page.elements)
    if shown < page.total:
        consoles.err().print(
            f"elements {page.offset}-{shown - 1} of {page.total}: --offset {shown} shows more",
            markup=False,
        )


@jobs_app.command("cancel-elements")
def cancel_elements(
    job_id: common.JobIdArgument,
    indices: Annotated[str, typer.Argument(help='The elements to cancel: "3", "0-9", "0-9:2,15".')],
    resource: common.ResourceOption,
    server: common.ServerOption = DEFAULT_URL,
    token: common.TokenOption = None,
) -> None:
    """Cancel chosen elements of an array job (the others run on)."""
    with common._gateway(server, token) as client:
        client.cancel_elements(resource, job_id, indices)
