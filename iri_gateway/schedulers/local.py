"""The local resource: a plain bash script run on this machine, no batch system."""

from __future__ import annotations

from iri_gateway.models.plan import Decision
from iri_gateway.runtimes.base import Invocation

name = "local"
template = "local.sh.j2"


def directives(decision: Decision, invocation: Invocation) -> list[str]:
    return []


def launcher(decision: Decision) -> list[str]:
    return []
