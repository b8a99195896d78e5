"""The local resource's script: plain bash run on this machine, no directives, no launcher."""

from __future__ import annotations

from iri_gateway.models.plan import Decision
from iri_gateway.runtimes.base import Invocation
from iri_gateway.schedulers.base import ClusterLayout
from iri_gateway.shell import SiteWord


def directives(decision: Decision, invocation: Invocation) -> list[str]:
    return []


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
