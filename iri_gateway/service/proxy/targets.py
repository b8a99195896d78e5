"""Which ports a job has, and whether one may be reached now: the proxy's rules of access.

A job's ports are in its plan: a cluster job's members' (`cluster.ports`, member -> name ->
port) or a plain job's (`ports` of its effective spec, its one member named `main`). A port
is reached only for its job's owner, only while its member runs: before, 409 (it may open);
after the job or the member ended, 410. Another user's job, an unknown member and an
undeclared port are one answer (404), so nobody probes which jobs exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from iri_gateway.models.cluster_ports import PLAIN_MEMBER
from iri_gateway.models.job import JobState
from iri_gateway.service.operations.store import JobRecord
from iri_gateway.service.proxy.errors import PortClosedError, PortNotFoundError, PortNotOpenError


@dataclass(frozen=True)
class DeclaredPort:
    """One port a job declared: its member, name and number."""

    member: str
    name: str
    port: int


def declared(record: JobRecord) -> list[DeclaredPort]:
    """Every port of the job, members in order."""
    cluster = record.cluster_ports
    if cluster:
        return [
            DeclaredPort(member, name, port)
            for member, ports in cluster.items()
            for name, port in ports.items()
        ]
    ports: dict[str, int] = record.effective_spec.get("ports") or {}
    return [DeclaredPort(PLAIN_MEMBER, name, port) for name, port in ports.items()]


def find(record: JobRecord | None, owner: str, member: str, name: str) -> DeclaredPort:
    """The declared port `name` of `member` of `owner`'s job; PortNotFoundError otherwise."""
    if record is not None and record.owner == owner:
        for port in declared(record):
            if port.member == member and port.name == name:
                return port
    raise PortNotFoundError(
        f"no port {name!r} of member {member!r} in a job of yours with this id (a job lists "
        "its ports in getJob's meta_data `ports`)"
    )


def member_view(record: JobRecord, member: str) -> dict[str, Any] | None:
    """A cluster member as the job last recorded it (None: not listed yet, or a plain job)."""
    for view in record.members:
        if view.get("name") == member:
            return view
    return None


def check_open(record: JobRecord, member: str) -> None:
    """Nothing when `member` of the job runs now; PortNotOpenError before, PortClosedError
    after."""
    state = JobState(record.state)
    if state.final:
        raise PortClosedError(f"job {record.id} has ended ({state.value}): its ports are closed")
    if state is not JobState.ACTIVE:
        raise PortNotOpenError(
            f"job {record.id} is {state.value}: its ports open when it runs; try again then"
        )
    if member == PLAIN_MEMBER and not record.cluster_ports:
        return
    view = member_view(record, member)
    if view is None:
        raise PortNotOpenError(
            f"member {member} of job {record.id} has not started yet; try again in a moment"
        )
    if view.get("state") != JobState.ACTIVE.value:
        raise PortClosedError(
            f"member {member} of job {record.id} has ended ({view.get('state')}): its ports "
            "are closed"
        )


def open_now(record: JobRecord | None, member: str) -> bool:
    """Whether the member runs (a connection open to it is cut when this turns False)."""
    if record is None:
        return False
    try:
        check_open(record, member)
    except (PortNotOpenError, PortClosedError):
        return False
    return True
