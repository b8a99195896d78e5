"""`iri-gateway submit A.json B.json ...`: several JobSpec files sent in one bulk launch.

Why one call: each file is still its own job, but one request (launchJobs) is one round trip,
one commit and one wait for the lot, where a loop of launches pays each of them per file.
Each file gets its own line: its job id on stdout (`<job id>  <file>`), or its refusal on
stderr, the gateway's problem with the fields named in the file (`[i]` is dropped). The
command fails if any file was refused: exit 2 when every refusal is a spec the gateway
finds invalid (400 or 422), else 1. With `--wait`, each launched job is waited for in turn.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from iri_gateway.cli import consoles

if TYPE_CHECKING:
    from iri_gateway.client import GatewayClient, LaunchResult

EXIT_ERROR = 1
EXIT_INVALID = 2
INVALID = frozenset({400, 422})
"""The statuses of a spec refused as invalid (the one-file `submit` exits 2 on them too)."""


def submit_files(
    client: GatewayClient,
    resource: str,
    files: Sequence[str],
    documents: Sequence[dict[str, Any]],
    *,
    idempotency_key: str | None,
    project: str | None,
    wait: Callable[[str], int] | None,
) -> int:
    """Launch `documents` (read from `files`) in one bulk call, print each file's outcome,
    and wait for the launched jobs with `wait` if given; the command's exit code."""
    results = client.launch_jobs(
        resource, list(documents), idempotency_key=idempotency_key, project=project
    )
    refused: list[int] = []
    launched: list[str] = []
    for result in results:
        name = files[result.index]
        if result.job is not None and result.error is None:
            again = "  (made by an earlier call with this key)" if result.replayed else ""
            sys.stdout.write(f"{result.job.id}  {name}{again}\n")
            launched.append(result.job.id)
        else:
            _say_refused(name, result)
            refused.append(result.status)
    sys.stdout.flush()
    waited = [wait(job_id) for job_id in launched] if wait is not None else []
    if refused:
        consoles.err().print(
            f"{len(refused)} of {len(files)} files refused, {len(launched)} launched",
            markup=False,
        )
        return EXIT_INVALID if set(refused) <= INVALID else EXIT_ERROR
    return max(waited, default=0)


def _say_refused(name: str, result: LaunchResult) -> None:
    """A file's refusal on stderr, its fields named as they are in the file."""
    error = result.refusal()
    lines = [f"{name}: refused ({result.status})"]
    if error is not None:
        lines[0] += f" {error.title}: {error.detail}"
        lines += [f"  {p.get('name', '')}: {p.get('reason', '')}" for p in error.invalid_params]
    if result.job is not None:
        lines.append(f"  job {result.job.id} is {result.job.state.value}")
    consoles.err().print("\n".join(lines), markup=False)
