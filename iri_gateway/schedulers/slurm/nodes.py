"""`squeue` and `sinfo`: the nodes of a running job and their addresses (the port proxy).

`squeue -h -j ID -o "%B %N"` prints a line per component of the job (one; each of a het
job's): its batch host and its node list; `sinfo -h -N -n LIST -o "%N %o"` a line per node
and partition: the node's name and its `NodeAddr`. Both print only what Slurm and the
administrator wrote; `scontrol show job` would be one command, but it puts the user's own
text (the job's name, its working directory, its output paths) on the same line as
`NodeList=`, where a job named `x NodeList=gateway-db` could pass for a node.
"""

from __future__ import annotations

from iri_gateway.errors import StatusError
from iri_gateway.models.job import JobNodes
from iri_gateway.schedulers.slurm import outage
from iri_gateway.transport.base import CommandResult


def job_argv(job_id: str) -> list[str]:
    return ["squeue", "--noheader", f"--jobs={job_id}", "--format=%B %N"]


def parse_job(result: CommandResult) -> tuple[str, list[str]] | None:
    """The batch host and the node lists of the job's components; None when Slurm lists no
    running component (queued: no batch host yet, or gone)."""
    if not result.ok:
        if "Invalid job id" in result.stderr:
            return None
        outage.check(result, "status query")
        raise StatusError(result.argv, result.exit_code, result.stdout, result.stderr)
    hosts: list[str] = []
    lists: list[str] = []
    for line in result.stdout.splitlines():
        words = line.split()
        if len(words) != 2 or words[0] in ("n/a", "(null)") or words[1] in ("n/a", "(null)"):
            continue  # a component that waits has no batch host or nodes yet
        hosts.append(words[0])
        lists.append(words[1])
    if not hosts:
        return None
    return hosts[0], lists


def nodes_argv(node_lists: list[str]) -> list[str]:
    return ["sinfo", "--noheader", "--Node", f"--nodes={','.join(node_lists)}", "--format=%N %o"]


def parse_nodes(result: CommandResult, batch_host: str) -> JobNodes:
    """Each node's address (its `NodeAddr`); StatusError with sinfo's words when it fails
    or does not list the batch host."""
    if not result.ok:
        outage.check(result, "status query")
        raise StatusError(result.argv, result.exit_code, result.stdout, result.stderr)
    addresses: dict[str, str] = {}
    for line in result.stdout.splitlines():
        words = line.split()
        if len(words) == 2:
            addresses[words[0]] = words[1]
    if batch_host not in addresses:
        raise StatusError(
            result.argv,
            result.exit_code,
            result.stdout,
            result.stderr,
            hint=f"sinfo did not list the job's batch host {batch_host!r}",
        )
    return JobNodes(batch_host, addresses)
