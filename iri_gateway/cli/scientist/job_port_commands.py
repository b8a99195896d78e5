"""`iri-gateway jobs open` and `jobs forward`: a running job's service ports, from a laptop.

`jobs open JOB [MEMBER] PORT -r R` prints a link that opens the port in a browser (once,
within the gateway's `proxy_link_ttl`), or opens it (`--browser`); `--wait` waits for the
job (or member) to run first, with its state on stderr. `jobs forward JOB [MEMBER] PORT -r R
--local 8888` listens on 127.0.0.1:8888 and carries each connection to the port through the
gateway (a tunnel per connection, authenticated with the token), for services that do not
speak HTTP, until Ctrl-C. MEMBER is `main` for a job without roles (the default), else the
member's name (`worker2`).

Exit codes as the other client commands: 0 done, 2 bad input (or the time ran out waiting),
1 any other refusal, with the gateway's words; 130 after Ctrl-C stops a forward.
"""

from __future__ import annotations

import time
import webbrowser
from typing import TYPE_CHECKING, Annotated

import typer

from iri_gateway.cli import consoles
from iri_gateway.cli.scientist import client_commands as common
from iri_gateway.cli.scientist.job_watch_commands import EXIT_INTERRUPTED, jobs_app
from iri_gateway.client.models import DEFAULT_URL

if TYPE_CHECKING:
    from iri_gateway.client import GatewayClient, GatewayClientError, PortLink

PLAIN_MEMBER = "main"
LONGEST_PAUSE = 3.0
"""Seconds between two looks at a job that does not run yet (`open --wait`), at most."""

PortArguments = Annotated[
    list[str],
    typer.Argument(
        help="[MEMBER] PORT: the port's name as the job declared it, after the member's "
        "name for a cluster job (`worker2 ui`); MEMBER is `main` for a job without roles."
    ),
]


def _member_and_port(names: list[str]) -> tuple[str, str]:
    if len(names) == 1:
        return PLAIN_MEMBER, names[0]
    if len(names) == 2:
        return names[0], names[1]
    common._fail(
        f"give the port's name, after its member's for a cluster job ([MEMBER] PORT), "
        f"not {len(names)} names: {' '.join(names)}",
        common.EXIT_INVALID,
    )


def _link_when_running(
    client: GatewayClient,
    resource: str,
    job_id: str,
    member: str,
    port: str,
    timeout: float | None,
) -> PortLink:
    """The link, asked again while the gateway says the member does not run yet (409)."""
    from iri_gateway.client import Conflict

    deadline = None if timeout is None else time.monotonic() + timeout
    pause = 0.5
    with consoles.err().status(f"waiting for job {job_id} to run") as line:
        while True:
            try:
                return client.open_port(resource, job_id, port, member)
            except Conflict as not_yet:
                if deadline is not None and time.monotonic() + pause > deadline:
                    common._fail(
                        f"job {job_id} member {member} does not run after {timeout:g} s: "
                        f"{not_yet.detail}",
                        common.EXIT_TIMEOUT,
                    )
                state = client.status(resource, job_id).state.value
                line.update(f"waiting for job {job_id} to run (it is {state})")
            time.sleep(pause)
            pause = min(pause * 1.5, LONGEST_PAUSE)


@jobs_app.command("open")
def open_port(
    job_id: common.JobIdArgument,
    names: PortArguments,
    resource: common.ResourceOption,
    browser: Annotated[
        bool, typer.Option("--browser", "-b", help="Open the link in this machine's browser.")
    ] = False,
    wait: Annotated[
        bool, typer.Option("--wait", "-w", help="Wait for the job to run first.")
    ] = False,
    timeout: common.TimeoutOption = None,
    server: common.ServerOption = DEFAULT_URL,
    token: common.TokenOption = None,
) -> None:
    """Print a link that opens a running job's port in a browser (it works once, for a
    minute or so; it sets a session for that port only on the gateway's proxy origin)."""
    member, port = _member_and_port(names)
    with common._gateway(server, token) as client:
        if wait:
            link = _link_when_running(client, resource, job_id, member, port, timeout)
        else:
            link = client.open_port(resource, job_id, port, member)
    print(link.url)
    if browser and not webbrowser.open(link.url):
        common._fail("no browser could be started here: open the link above yourself")


@jobs_app.command("forward")
def forward(
    job_id: common.JobIdArgument,
    names: PortArguments,
    resource: common.ResourceOption,
    local: Annotated[
        int,
        typer.Option(
            "--local", "-l", min=0, max=65535, help="The local port to listen on (0: any free)."
        ),
    ] = 0,
    bind: Annotated[
        str,
        typer.Option(
            "--bind",
            help="The local address to listen on; the default lets only this machine in.",
        ),
    ] = "127.0.0.1",
    server: common.ServerOption = DEFAULT_URL,
    token: common.TokenOption = None,
) -> None:
    """Forward a local port to a running job's port through the gateway (any TCP service:
    a database, SSH, a kernel), until Ctrl-C."""
    member, port = _member_and_port(names)
    err = consoles.err()

    def refused(error: GatewayClientError) -> None:
        err.print(f"a connection was refused: {error}", markup=False)

    with common._gateway(server, token) as client:
        try:
            forward = client.forward_port(
                resource, job_id, port, member, local_port=local, host=bind, on_error=refused
            )
        except OSError as error:
            common._fail(f"cannot listen on {bind}:{local}: {error.strerror or error}")
    host, number = forward.address
    err.print(
        f"forwarding {host}:{number} to port {port} of job {job_id} "
        f"(member {member}); Ctrl-C stops",
        markup=False,
    )
    try:
        forward.serve_forever()
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        forward.close()
