"""`iri-gateway jobs`: list your jobs (`jobs -r R`), or watch them live (`jobs watch`).

`jobs watch [JOB...] [--resource R] [--state S]` prints one line per change of state of
your jobs as the gateway's event stream delivers it (`--json`: the event's JSON, one line
each). Given job ids (with their `--resource`), it reads each job once after subscribing,
so a job already final is not waited for, and ends when every one of them is final: exit 0
when all completed, 1 when any failed or was canceled, 2 when `--timeout` ran out first.
Without job ids it watches until Ctrl-C (exit 130, no traceback) or the timeout (exit 0).
Against a server without the stream (a plain IRI server) it polls the given jobs instead,
saying so on stderr; without job ids there is nothing to poll, and it says so (exit 1).
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer

from iri_gateway.cli import consoles
from iri_gateway.cli.scientist import client_commands as common
from iri_gateway.client.models import DEFAULT_URL
from iri_gateway.models.job import JobState

if TYPE_CHECKING:
    from iri_gateway.client import GatewayClient, JobEvent, JobInfo

EXIT_INTERRUPTED = 130

jobs_app = typer.Typer(
    help="Your jobs on a resource (`jobs -r R`), or live (`jobs watch`).",
    invoke_without_command=True,
    no_args_is_help=False,
)


@jobs_app.callback()
def jobs(
    context: typer.Context,
    resource: Annotated[
        str | None, typer.Option("--resource", "-r", help="Resource id (to list its jobs).")
    ] = None,
    historical: Annotated[bool, typer.Option("--all", "-a", help="Finished jobs too.")] = False,
    as_json: common.JsonOption = False,
    server: common.ServerOption = DEFAULT_URL,
    token: common.TokenOption = None,
) -> None:
    """List your jobs on a resource (running ones; all of them with --all); `jobs watch`
    follows them live."""
    if context.invoked_subcommand is not None:
        return
    if resource is None:
        common._fail("jobs: --resource (-r) names the resource whose jobs to list", 2)
    common.jobs(resource, historical, as_json, server, token)


def _line(event: JobEvent) -> str:
    when = datetime.fromtimestamp(event.time or 0, UTC).strftime("%H:%M:%S")
    what = event.job_id or event.task_id or "-"
    if event.element is not None:
        what += f" element {event.element}"
    elif event.member:
        what += f" member {event.member}"
    message = f"  {event.message}" if event.message else ""
    style = {"completed": "green", "failed": "bold red", "canceled": "yellow"}.get(
        event.state or "", ""
    )
    state = f"[{style}]{event.state}[/]" if style else str(event.state)
    return f"{when}  {what}  {state}{message}"


def _exit_code(finals: dict[str, JobInfo]) -> int:
    return 0 if all(j.state == JobState.COMPLETED for j in finals.values()) else common.EXIT_ERROR


@jobs_app.command("watch")
def watch(
    job_ids: Annotated[
        list[str] | None, typer.Argument(help="Job ids to follow until they end.")
    ] = None,
    resource: Annotated[
        str | None, typer.Option("--resource", "-r", help="Only this resource's jobs.")
    ] = None,
    states: Annotated[
        list[str] | None,
        typer.Option("--state", "-s", help="Only changes to this state (repeatable)."),
    ] = None,
    timeout: common.TimeoutOption = None,
    as_json: common.JsonOption = False,
    server: common.ServerOption = DEFAULT_URL,
    token: common.TokenOption = None,
) -> None:
    """Print each change of state of your jobs as it happens; with JOB ids, end when they
    are all final (exit 0 all completed, 1 any failed or canceled, 2 time ran out)."""
    wanted = list(dict.fromkeys(job_ids or []))
    if wanted and resource is None:
        common._fail("jobs watch: JOB ids need --resource (-r), the resource they run on", 2)
    try:
        with common._gateway(server, token) as client:
            code = _watch(client, wanted, resource, states or [], timeout, as_json)
    except KeyboardInterrupt:
        consoles.err().print("stopped watching", markup=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if code:
        raise typer.Exit(code)


def _watch(
    client: GatewayClient,
    wanted: list[str],
    resource: str | None,
    states: list[str],
    timeout: float | None,
    as_json: bool,
) -> int:
    from iri_gateway.client import StreamUnavailable

    # The jobs' final states always come, so that watching them can end; others are filtered.
    asked = [*states, *(s.value for s in JobState if s.final)] if wanted and states else states
    try:
        stream = client.watch(resource, wanted, asked, timeout=timeout)
    except StreamUnavailable as missing:
        if not wanted or resource is None:
            common._fail(f"{missing}\njobs watch: this server has no event stream to watch")
        consoles.err().print(
            f"{client.server} has no event stream; polling the jobs instead", markup=False
        )
        return _poll(client, wanted, resource, timeout, as_json)
    finals: dict[str, JobInfo] = {}
    with stream:
        if wanted and resource is not None:
            _read(client, wanted, resource, finals)
            if len(finals) == len(wanted):
                return _exit_code(finals)
        for event in stream:
            if event.type == "gap":
                consoles.err().print(f"events were missed: {event.message}", markup=False)
                if resource is not None:
                    _read(client, wanted, resource, finals)
            else:
                if not states or event.state in states:
                    _show(event, as_json)
                job = event.job
                if event.type == "job" and job is not None and job.final and job.id in wanted:
                    finals[job.id] = job
            if wanted and len(finals) == len(wanted):
                return _exit_code(finals)
    if not wanted:
        return 0
    left = ", ".join(j for j in wanted if j not in finals)
    consoles.err().print(f"jobs still running after {timeout:g} s: {left}", markup=False)
    return common.EXIT_TIMEOUT


def _read(
    client: GatewayClient, wanted: list[str], resource: str, finals: dict[str, JobInfo]
) -> None:
    """Read each watched job once: a final one needs no waiting."""
    for job_id in wanted:
        job = client.status(resource, job_id)
        if job.final:
            finals[job.id] = job
            consoles.out().print(f"{job.id}  {common._state(job)}  (already)")


def _show(event: JobEvent, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(event.data) + "\n")
        sys.stdout.flush()
    else:
        consoles.out().print(_line(event))


def _poll(
    client: GatewayClient, wanted: list[str], resource: str, timeout: float | None, as_json: bool
) -> int:
    from iri_gateway.client import WaitTimeout

    deadline = None if timeout is None else time.monotonic() + timeout
    shown: dict[str, str] = {}

    def seen(job: JobInfo) -> None:
        if shown.get(job.id) != job.state.value:
            shown[job.id] = job.state.value
            if as_json:
                sys.stdout.write(json.dumps({"job_id": job.id, "state": job.state.value}) + "\n")
            else:
                consoles.out().print(f"{job.id}  {common._state(job)}")

    finals: dict[str, JobInfo] = {}
    for job_id in wanted:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            finals[job_id] = client.wait(
                resource, job_id, timeout=left, on_update=seen, use_events=False
            )
        except WaitTimeout as timed_out:
            consoles.err().print(str(timed_out), markup=False)
            return common.EXIT_TIMEOUT
    return _exit_code(finals)
