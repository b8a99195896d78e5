"""A caller's storage on a resource: the profile's `storage` section filled in for them.

Path templates get the caller's `{user}`, `{account}`, `{account_initial}` and, once per
project the caller may charge, `{project}`; a filled-in value that is not one safe path
component (no '/', not '.' or '..') leaves that location out rather than naming another
folder. The official filters are applied here: `logicalpath`, `project` and `intent`
(`staging` leaves archive out, `long-term-storage` keeps only archive, `write` leaves out what
is read-only from a job, `read` keeps everything).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from iri_gateway.models.storage import (
    AccessEndpointConfig,
    LogicalName,
    Storage,
    StorageIntent,
    StorageLocation,
)
from iri_gateway.service.files.policy import normal, safe_component


@dataclass(frozen=True)
class Caller:
    """Who asks: the gateway user, the account running their jobs there, their projects."""

    user: str
    account: str
    projects: tuple[str, ...]


def fill(template: str, caller: Caller, project: str | None = None) -> str | None:
    """`template` with the caller's values, or None when a value it uses is unsafe (or it
    names `{project}` and no project is given)."""
    values = {
        "{user}": caller.user,
        "{account}": caller.account,
        "{account_initial}": caller.account[:1],
        "{project}": project or "",
    }
    path = template
    for key, value in values.items():
        if key not in template:
            continue
        if not safe_component(value):
            return None
        path = path.replace(key, value)
    return normal(path)


def _intended(location: StorageLocation, intent: StorageIntent | None) -> bool:
    if intent == "staging":
        return location.logical_name != "archive"
    if intent == "long-term-storage":
        return location.logical_name == "archive"
    if intent == "write":
        return location.access.write
    return True


def locations(
    storage: Storage,
    caller: Caller,
    *,
    logical_name: LogicalName | None = None,
    project: str | None = None,
    intent: StorageIntent | None = None,
) -> list[StorageLocation]:
    """The caller's locations, filled in and filtered, in profile order. `project` keeps
    only that project's project-scoped locations (it must be one of the caller's: the API
    checks); locations without `{project}` are kept whatever the project."""
    projects: Sequence[str] = caller.projects if project is None else (project,)
    found: list[StorageLocation] = []
    for location in storage.locations:
        if logical_name is not None and location.logical_name != logical_name:
            continue
        if not _intended(location, intent):
            continue
        scoped = "{project}" in location.path
        for each in projects if scoped else (None,):
            path = fill(location.path, caller, each)
            if path is not None:
                found.append(location.model_copy(update={"path": path}))
    return found


def access_endpoints(
    storage: Storage, caller: Caller, *, protocol: str | None = None, endpoint_id: str | None = None
) -> list[AccessEndpointConfig]:
    """The resource's access endpoints, filtered, with `root_path` filled in for the
    caller (an endpoint whose root cannot be filled in for them is left out)."""
    found: list[AccessEndpointConfig] = []
    for endpoint in storage.access_endpoints:
        if protocol is not None and endpoint.protocol != protocol:
            continue
        if endpoint_id is not None and endpoint.id != endpoint_id:
            continue
        if endpoint.root_path is None:
            found.append(endpoint)
            continue
        root = fill(endpoint.root_path, caller)
        if root is not None:
            found.append(endpoint.model_copy(update={"root_path": root}))
    return found
