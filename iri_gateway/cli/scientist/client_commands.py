"""Client commands of `iri-gateway` against a running server (docs/design.md Contract 3).

`submit`, `status`, `jobs` (with `jobs watch`, in `job_watch_commands`), `cancel`, `restart`,
`wait`, `output`, `remote-plan` and `remote-placement` talk to
the server named by `--server` (default `$IRI_GATEWAY_URL`, else http://127.0.0.1:8000) with
the token of `--token` (default `$IRI_GATEWAY_TOKEN`), through `iri_gateway.client`.
The SDK (and httpx with it) and rich are imported when a command runs, not when the command
line is built: `iri-gateway --help` and the local commands do not need them.

Exit codes: 0 success; 2 the gateway refused the job or request as invalid (400 or 422, one
problem per line on stderr); 1 any other error. `wait` (and `submit --wait`): 0 when the job
completed, 1 when it failed or was canceled, 2 when the time ran out; they wait on the
gateway's job event stream (polling a server without one, see `GatewayClient.wait`).
`submit` of several files sends them in one bulk launch (`bulk_submit`): 0 when every file's
job was launched, 2 when any was refused as invalid, 1 for any other refusal.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from iri_gateway.cli import consoles
from iri_gateway.client.models import DEFAULT_URL, TOKEN_ENV, URL_ENV, JobInfo
from iri_gateway.models.job import JobState

if TYPE_CHECKING:
    from iri_gateway.client import GatewayClient

EXIT_ERROR = 1
EXIT_INVALID = 2
EXIT_TIMEOUT = 2

ServerOption = Annotated[
    str,
    typer.Option(
        "--server", envvar=URL_ENV, show_envvar=True, help="Gateway URL (without /api/v2)."
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token", envvar=TOKEN_ENV, show_envvar=True, show_default=False, help="Bearer token."
    ),
]
ResourceOption = Annotated[str, typer.Option("--resource", "-r", help="Resource id.")]
JobIdArgument = Annotated[str, typer.Argument(help="Job id, as `submit` printed it.")]
JobFileArgument = Annotated[str, typer.Argument(help="JobSpec JSON file, or '-' for stdin.")]
JobFilesArgument = Annotated[
    list[str],
    typer.Argument(
        help="JobSpec JSON file, or '-' for stdin; several are sent in one bulk launch.",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]
TimeoutOption = Annotated[
    float | None,
    typer.Option("--timeout", help="Give up waiting after this many seconds (exit 2)."),
]


def _fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    consoles.err().print(message, markup=False)
    raise typer.Exit(code)


@contextmanager
def _gateway(server: str, token: str | None) -> Iterator[GatewayClient]:
    """A client; gateway errors end the command (422: exit 2, anything else: exit 1)."""
    from iri_gateway.client import GatewayClient, GatewayClientError, InvalidRequest

    try:
        with GatewayClient(server, token) as client:
            yield client
    except GatewayClientError as error:
        _fail(str(error), EXIT_INVALID if isinstance(error, InvalidRequest) else EXIT_ERROR)


def _read_spec(job: str, *, named: bool = False) -> dict[str, Any]:
    """The JobSpec document in file `job` (`-`: stdin); `named`: errors name the file."""
    try:
        text = sys.stdin.read() if job == "-" else Path(job).read_text(encoding="utf-8")
    except OSError as error:
        _fail(f"cannot read {job}: {error.strerror}")
    where = f"{job}: " if named else ""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        _fail(
            f"{where}(document): not JSON: {error.msg} at line {error.lineno} column {error.colno}",
            EXIT_INVALID,
        )
    if not isinstance(document, dict):
        _fail(f"{where}(document): a JobSpec is a JSON object", EXIT_INVALID)
    return document


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


_STYLES = {
    JobState.COMPLETED: "green",
    JobState.FAILED: "bold red",
    JobState.CANCELED: "yellow",
    JobState.ACTIVE: "cyan",
}


def _state(job: JobInfo) -> str:
    style = _STYLES.get(job.state)
    return f"[{style}]{job.state.value}[/]" if style else job.state.value


def _job_json(job: JobInfo) -> str:
    document = asdict(job)
    document["state"] = job.state.value
    return json.dumps(document, indent=2)


def _show_job(job: JobInfo) -> None:
    from rich.table import Table

    from iri_gateway.cli.views import members_table

    out = consoles.out()
    table = Table(title=f"Job {job.id}", show_header=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value")
    table.add_row("state", _state(job))
    table.add_row("exit code", "-" if job.exit_code is None else str(job.exit_code))
    table.add_row("message", job.message or "-")
    table.add_row("updated", _when(job.time))
    for key in ("resource_id", "native_id"):
        if job.meta_data.get(key):
            table.add_row(key.replace("_", " "), str(job.meta_data[key]))
    app = job.attributes.get("app")
    if isinstance(app, dict) and app.get("name"):
        table.add_row("app", " ".join(str(app[k]) for k in ("name", "version") if app.get(k)))
    for key in ("runtime", "queue", "flavour", "image"):
        if job.attributes.get(key):
            table.add_row(key, str(job.attributes[key]))
    out.print(table)
    members = job.meta_data.get("members") or []
    if members:
        out.print(members_table(members))
    history = job.meta_data.get("history") or []
    if history:
        steps = Table(title="History")
        for column in ("time", "state", "message"):
            steps.add_column(column)
        for step in history:
            steps.add_row(
                _when(step.get("time")), str(step.get("state", "")), str(step.get("message") or "")
            )
        out.print(steps)


def _wait_live(client: GatewayClient, resource: str, job_id: str, timeout: float | None) -> int:
    """Wait with the SDK's live status line on stderr; the exit code says how the job ended."""
    from iri_gateway.client import WaitTimeout

    try:
        job = client.wait(resource, job_id, timeout=timeout, progress=consoles.err())
    except WaitTimeout as timed_out:
        consoles.err().print(
            f"job {job_id} is still {timed_out.job.state.value} after {timeout:g} s", markup=False
        )
        return EXIT_TIMEOUT
    code = "" if job.exit_code is None else f", exit code {job.exit_code}"
    consoles.err().print(f"job {job_id} {_state(job)}{code}")
    return 0 if job.state == JobState.COMPLETED else EXIT_ERROR


# ---- commands ------------------------------------------------------------------------------


def _as_array(spec: dict[str, Any], indices: str | None, most: int | None) -> dict[str, Any]:
    """The JobSpec made an array by `--array` (and `--max-concurrent`); one that names its
    own `array` as well is refused (which should win is not for this command to guess)."""
    if indices is None:
        if most is not None:
            _fail("--max-concurrent goes with --array", EXIT_INVALID)
        return spec
    if "array" in spec:
        _fail(
            "the JobSpec has an `array` already: give the indices there or with --array, not both",
            EXIT_INVALID,
        )
    array: dict[str, Any] = {"indices": indices}
    if most is not None:
        array["max_concurrent"] = most
    return {**spec, "array": array}


def submit(
    jobs: JobFilesArgument,
    resource: ResourceOption,
    project: Annotated[
        str | None, typer.Option("--project", help="Project to charge (if not in the spec).")
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option("--idempotency-key", help="Retry-safe key: the same key, the same job."),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until the job ends.")] = False,
    timeout: TimeoutOption = None,
    array: Annotated[
        str | None,
        typer.Option(
            "--array",
            help='Run each job as an array of these indices ("0-99", "0-99:2", "1,5,10-20").',
        ),
    ] = None,
    max_concurrent: Annotated[
        int | None,
        typer.Option("--max-concurrent", min=1, help="With --array: at most N at once."),
    ] = None,
    server: ServerOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Submit JOBS to a resource of the gateway and print the job id (one file), or each
    file's job id or refusal (several files, sent in one bulk launch)."""
    if len(jobs) > 1:
        from iri_gateway.cli.scientist.bulk_submit import submit_files

        documents = [_as_array(_read_spec(job, named=True), array, max_concurrent) for job in jobs]
        with _gateway(server, token) as client:
            code = submit_files(
                client,
                resource,
                jobs,
                documents,
                idempotency_key=idempotency_key,
                project=project,
                wait=(lambda job_id: _wait_live(client, resource, job_id, timeout))
                if wait
                else None,
            )
        if code:
            raise typer.Exit(code)
        return
    spec = _as_array(_read_spec(jobs[0]), array, max_concurrent)
    with _gateway(server, token) as client:
        submitted = client.submit(resource, spec, idempotency_key=idempotency_key, project=project)
        sys.stdout.write(submitted.id + "\n")
        sys.stdout.flush()
        if wait:
            code = _wait_live(client, resource, submitted.id, timeout)
            if code:
                raise typer.Exit(code)


def status(
    job_id: JobIdArgument,
    resource: ResourceOption,
    as_json: JsonOption = False,
    server: ServerOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Show a job's state, exit code, message and history."""
    with _gateway(server, token) as client:
        job = client.status(resource, job_id)
    if as_json:
        sys.stdout.write(_job_json(job) + "\n")
    else:
        _show_job(job)


def jobs(
    resource: ResourceOption,
    historical: Annotated[bool, typer.Option("--all", "-a", help="Finished jobs too.")] = False,
    as_json: JsonOption = False,
    server: ServerOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """List your jobs on a resource (running ones; all of them with --all)."""
    with _gateway(server, token) as client:
        found = client.jobs(resource, historical=historical)
    if as_json:
        sys.stdout.write("[" + ",\n".join(_job_json(j) for j in found) + "]\n")
        return
    from rich.table import Table

    table = Table(title=f"Jobs on {resource} (times in UTC)")
    table.add_column("id", no_wrap=True, min_width=36)
    for column in ("state", "exit", "updated"):
        table.add_column(column, no_wrap=True)
    for job in found:
        updated = (
            "-"
            if job.time is None
            else datetime.fromtimestamp(job.time, UTC).strftime("%m-%d %H:%M:%S")
        )
        table.add_row(
            job.id, _state(job), "-" if job.exit_code is None else str(job.exit_code), updated
        )
    consoles.out().print(table)


def cancel(
    job_id: JobIdArgument,
    resource: ResourceOption,
    server: ServerOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Ask the gateway to cancel a job (`wait` sees it end)."""
    with _gateway(server, token) as client:
        client.cancel(resource, job_id)
    consoles.err().print(f"cancel requested for job {job_id}", markup=False)


def restart(
    job_id: JobIdArgument,
    resource: ResourceOption,
    as_json: JsonOption = False,
    server: ServerOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Run a job again as the same job, every member of a cluster job with it (a running
    job is stopped first); `wait` sees the new run end."""
    with _gateway(server, token) as client:
        job = client.restart(resource, job_id)
    if as_json:
        sys.stdout.write(_job_json(job) + "\n")
    else:
        _show_job(job)


def wait(
    job_id: JobIdArgument,
    resource: ResourceOption,
    timeout: TimeoutOption = None,
    server: ServerOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Wait until a job ends: exit 0 completed, 1 failed or canceled, 2 time ran out."""
    with _gateway(server, token) as client:
        code = _wait_live(client, resource, job_id, timeout)
    if code:
        raise typer.Exit(code)


def output(
    job_id: JobIdArgument,
    resource: ResourceOption,
    stderr: Annotated[bool, typer.Option("--stderr", help="Standard error, not output.")] = False,
    tail: Annotated[
        int | None, typer.Option("--tail", "-n", min=1, help="Only the last N lines.")
    ] = None,
    element: Annotated[
        int | None, typer.Option("--element", min=0, help="An array's element (its index).")
    ] = None,
    server: ServerOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Print a job's standard output (or error), as far as it has been written."""
    with _gateway(server, token) as client:
        try:
            text = client.output(
                resource, job_id, "stderr" if stderr else "stdout", tail=tail, element=element
            )
        except ValueError as error:
            _fail(f"{error} (--element N)", EXIT_INVALID)
    sys.stdout.write(text)


def remote_plan(
    job: JobFileArgument,
    resource: ResourceOption,
    server: ServerOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Dry run on the server: the plan as JSON, or the problems (exit 2)."""
    spec = _read_spec(job)
    with _gateway(server, token) as client:
        plan = client.plan(resource, spec)
    sys.stdout.write(plan.model_dump_json(indent=2) + "\n")


def placement(
    job: JobFileArgument,
    as_json: JsonOption = False,
    server: ServerOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Where could JOB run? Every resource of the server ranked, runnable ones first."""
    spec = _read_spec(job)
    with _gateway(server, token) as client:
        ranked = client.placement(spec)
    if as_json:
        sys.stdout.write(json.dumps([p.model_dump(mode="json") for p in ranked], indent=2) + "\n")
        return
    from iri_gateway.cli.views import placement_table

    consoles.out().print(placement_table(ranked))


COMMANDS: list[tuple[str, Callable[..., None]]] = [
    ("submit", submit),
    ("status", status),
    ("cancel", cancel),
    ("restart", restart),
    ("wait", wait),
    ("output", output),
    ("remote-plan", remote_plan),
    ("placement", placement),
]


def register(app: typer.Typer) -> None:
    """Add the client commands to `app`; a name already taken gets a `remote-` prefix."""
    taken = {
        info.name or (info.callback.__name__.replace("_", "-") if info.callback else "")
        for info in app.registered_commands
    }
    for name, function in COMMANDS:
        app.command(name if name not in taken else f"remote-{name}")(function)
