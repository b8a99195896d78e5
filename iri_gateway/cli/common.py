"""What the server's and the facility admin's commands share: exit codes, failing, `--json`.

Exit codes: 0 success; 2 the job cannot run (or is not a valid JobSpec), with one problem per
line on stderr, each naming its field path; 1 any other error (broken profile, unknown
resource, failed check). The scientist's client commands keep their own, alike
(`scientist.client_commands`).
"""

from __future__ import annotations

from typing import Annotated, NoReturn

import typer

from iri_gateway.cli import consoles

EXIT_ERROR = 1
EXIT_CANNOT_RUN = 2

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    """Say `message` on stderr (as it is: no markup) and end the command with `code`."""
    consoles.err().print(message, markup=False)
    raise typer.Exit(code)
