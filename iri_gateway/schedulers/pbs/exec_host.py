"""A running PBS job's hosts, from qstat's `exec_host` (the port proxy's target).

`exec_host` is `host/N[*C]` per chunk, joined by `+` (`pbs-n1/0*2+pbs-n2/0`), written by the
server, never by the user; the first host runs the job's script. A host is its address as
well: PBS names hosts by their host names (`resources_available.host`), which resolve where
the proxy connects (the gateway, or the login node for a resource reached over SSH).
"""

from __future__ import annotations

from collections.abc import Mapping

from iri_gateway.models.job import JobNodes
from iri_gateway.schedulers.pbs.qstat import PbsJob

RUNNING = "R"


def hosts(value: str) -> list[str]:
    """The hosts of an `exec_host` value, in order, each once."""
    found: list[str] = []
    for chunk in value.split("+"):
        host = chunk.split("/", 1)[0].strip()
        if host and host not in found:
            found.append(host)
    return found


def nodes(jobs: Mapping[str, PbsJob], native_id: str) -> JobNodes | None:
    """Where job `native_id` runs; None unless qstat shows it running with hosts."""
    job = jobs.get(native_id) or next(
        (job for job_id, job in jobs.items() if job_id.split(".")[0] == native_id.split(".")[0]),
        None,
    )
    if job is None or job.state != RUNNING or not job.exec_host:
        return None
    found = hosts(job.exec_host)
    if not found:
        return None
    return JobNodes(found[0], {host: host for host in found})
