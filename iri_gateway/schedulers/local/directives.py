"""The local resource's script: plain bash on this machine, no launcher; an array's one line."""

from __future__ import annotations

from iri_gateway.models.plan import Decision
from iri_gateway.runtimes.base import Invocation
from iri_gateway.schedulers.base import ClusterLayout
from iri_gateway.shell import SiteWord

ARRAY_DIRECTIVE = "#IRI-LOCAL --array="
"""The one directive line of a local script: an array's indices and `%N` throttle, in
Slurm's form, read back by the local batch system when it starts the array."""


def directives(decision: Decision, invocation: Invocation) -> list[str]:
    array = decision.spec.array
    if array is None:
        return []
    throttle = f"%{array.max_concurrent}" if array.max_concurrent else ""
    return [f"{ARRAY_DIRECTIVE}{array.elements().text()}{throttle}"]


def launcher(decision: Decision) -> list[str]:
    return []


def cluster_layout(decision: Decision) -> ClusterLayout:
    """Every member runs on this machine as a background process, reached on loopback."""
    cluster = decision.cluster
    assert cluster is not None
    host = SiteWord("${HOSTNAME:-localhost}")
    return ClusterLayout(
        "${IRI_LOCAL_JOB_ID}",
        [],
        ["echo 127.0.0.1"],
        [host] * cluster.size,
        [[] for _ in cluster.members],
    )
