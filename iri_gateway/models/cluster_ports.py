"""Service ports of a cluster job's members, and of a plain job (docs/jobspec.md, Service ports).

A role declares named base ports (`{"http": 8080}`); member k of the role (1-based) listens
on base + k - 1. Why this rule and not "an offset by the member's place on its node": the
port is known when the job is planned, before the scheduler picks nodes, so the plan, the
environment of every member and getJob can all name it; it depends on nothing the script
discovers at run time; and since the JobSpec refuses overlapping ranges (roles and names
together), no two members of one job ever hold the same port, wherever they land, even
when several share one node and one address (the local scheduler: all of them).
"""

from __future__ import annotations

from collections.abc import Iterable

PORT_VARIABLE_PREFIX = "IRI_CLUSTER_PORT_"
ENDPOINTS_VARIABLE = "IRI_CLUSTER_ENDPOINTS"
JOB_PORT_VARIABLE_PREFIX = "IRI_PORT_"
PLAIN_MEMBER = "main"
"""The one member of a job without roles, as the port proxy names it (`/<job>/main/<port>/`):
cluster members' names always end in a digit, so no member of a cluster job is named so."""


def job_port_variables(ports: dict[str, int]) -> dict[str, str]:
    """`IRI_PORT_LAB=8888`, one per named port of a job without roles."""
    return {f"{JOB_PORT_VARIABLE_PREFIX}{name.upper()}": str(port) for name, port in ports.items()}


def member_ports(ports: dict[str, int], index: int) -> dict[str, int]:
    """The ports of member `index` (1-based) of a role declaring `ports`."""
    return {name: base + index - 1 for name, base in ports.items()}


def port_variables(ports: dict[str, int]) -> dict[str, str]:
    """`IRI_CLUSTER_PORT_HTTP=8081`, one per named port of one member."""
    return {f"{PORT_VARIABLE_PREFIX}{name.upper()}": str(port) for name, port in ports.items()}


def all_member_ports(
    roles: Iterable[tuple[str, int, dict[str, int]]],
) -> dict[str, dict[str, int]]:
    """Member name -> its ports, for roles given as (name, count, ports), in member order;
    members of roles without ports are left out."""
    return {
        f"{name}{index}": member_ports(ports, index)
        for name, count, ports in roles
        if ports
        for index in range(1, count + 1)
    }


def endpoints(ports_by_member: dict[str, dict[str, int]]) -> str:
    """`IRI_CLUSTER_ENDPOINTS`: `http:master1:8080,http:master2:8081,...`; each member name
    resolves to its node inside every member (the cluster's hosts file)."""
    return ",".join(
        f"{name}:{member}:{port}"
        for member, ports in ports_by_member.items()
        for name, port in ports.items()
    )
