"""Many PSI/J jobs sent in bulk launches (launchJobs), for `IriJobExecutor.submit_many`.

PSI/J has no job arrays: a sweep is many jobs, and one launch per job is one request, one
commit and one wait each. Here they go as lists, one call per group: jobs that name their
project (`attributes.account`) apart from those that take the executor's (the gateway
refuses a project given in both places), at most `CHUNK` jobs a call (the gateway's default
bound, `bulk_max_specs`). Each call's Idempotency-Key is made from its jobs' PSI/J ids, as
`submit` sends the job's id: a call sent again (by the SDK after a lost answer, or by the
program after an error) finds each job instead of running it twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from iri_gateway.client import GatewayClient, GatewayClientError, JobInfo

CHUNK = 1000
"""Jobs per bulk launch: the gateway's default `bulk_max_specs`."""


def launch_in_bulk(
    client: GatewayClient,
    resource: str,
    project: str | None,
    documents: Mapping[int, dict[str, Any]],
    ids: Mapping[int, str],
) -> dict[int, JobInfo | GatewayClientError]:
    """Launch the IRI JobSpecs `documents` (by the job's position in the caller's list; `ids`
    their PSI/J job ids): each position's job, or the gateway's refusal of it (of the whole
    call, when the call itself failed)."""
    groups: dict[bool, list[int]] = {}
    for position, document in documents.items():
        named = bool((document.get("attributes") or {}).get("account"))
        groups.setdefault(named, []).append(position)
    answers: dict[int, JobInfo | GatewayClientError] = {}
    for named, positions in groups.items():
        for start in range(0, len(positions), CHUNK):
            chunk = positions[start : start + CHUNK]
            digest = hashlib.sha256("\n".join(ids[p] for p in chunk).encode()).hexdigest()
            try:
                results = client.launch_jobs(
                    resource,
                    [documents[p] for p in chunk],
                    idempotency_key=f"psij-bulk-{digest[:40]}",
                    project=None if named else project,
                )
            except GatewayClientError as error:
                answers.update(dict.fromkeys(chunk, error))
                continue
            for result in results:
                refusal = result.refusal() or GatewayClientError(result.status, "Refused", "")
                answers[chunk[result.index]] = (
                    result.job if result.ok and result.job is not None else refusal
                )
    return answers
