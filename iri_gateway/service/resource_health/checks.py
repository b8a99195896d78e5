"""The probes of one resource, as FirecREST v2 makes them: its scheduler, its login node, and
each of its file roots, each a cheap command through the resource's own transport.

- `scheduler`: the scheduler plug-in's own probe (`BatchSystem.ping`: `scontrol ping` for
  Slurm, `qstat -B` for PBS; the local scheduler has nothing to ask).
- `login`: `true` run on the login node (SSH), which needs a connection, the key accepted and
  a session; on this machine there is no login node to lose, so it is up without a command.
- `file root <template>`: `stat -L -c %F` of each `files.roots` entry, cut before its first
  placeholder (`/pscratch/sd/{account_initial}/{account}` probes `/pscratch/sd`: whether the
  filesystem is there, not one user's folder); `~` is the probing account's home.

They run as one account: on an SSH resource the account of the first gateway user (by name)
in `connection.ssh.user_mapping`; a resource that maps nobody has no account to probe with,
and its `login` probe fails saying so (no job can run there either). A probe returns its
words on success and raises with the tool's own words on failure; the caller bounds its time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.service.operations.backends import Backend, Backends
from iri_gateway.transport.base import TransportError

Kind = Literal["scheduler", "login", "file_root"]
"""What a probe looks at: a failed scheduler or login makes its resource down, a failed file
root degraded."""


class ProbeFailedError(Exception):
    """A probe's command ran and said no; the message is its own words."""


@dataclass(frozen=True)
class Check:
    """One probe of a resource: its name (`scheduler`, `login`, `file root /scratch`), what it
    looks at, and how to run it with a time-out in seconds (its words, or an exception)."""

    name: str
    kind: Kind
    run: Callable[[float], str]


def probing_owner(loaded: LoadedResource) -> str | None:
    """The gateway user whose account runs the probes ('' on this machine: the gateway's own
    account); None when an SSH resource maps nobody."""
    ssh = loaded.resource.connection.ssh
    if loaded.resource.connection.mode != "ssh" or ssh is None:
        return ""
    return min(ssh.user_mapping) if ssh.user_mapping else None


def fixed_part(template: str) -> str:
    """A root template cut before the first component holding a placeholder."""
    kept: list[str] = []
    for component in template.split("/"):
        if "{" in component:
            break
        kept.append(component)
    return "/".join(kept) or "/"


def checks_of(loaded: LoadedResource, backends: Backends) -> list[Check]:
    """The probes of `loaded` (see the module's docstring)."""
    owner = probing_owner(loaded)
    if owner is None:
        return [Check("login", "login", _nobody_mapped)]
    backend = backends.get(loaded, owner)
    checks = [
        Check("scheduler", "scheduler", backend.batch.ping),
        Check("login", "login", partial(_login, backend)),
    ]
    for template in dict.fromkeys(loaded.resource.files.roots):
        checks.append(
            Check(
                f"file root {template}", "file_root", partial(_stat, backend, fixed_part(template))
            )
        )
    return checks


def _nobody_mapped(timeout: float) -> str:
    raise ProbeFailedError(
        "no account to probe with: connection.ssh.user_mapping maps no gateway user (the "
        "account_rules need a caller's claims, which a probe has not); map one user by name "
        "for the probes"
    )


def _login(backend: Backend, timeout: float) -> str:
    if backend.in_process:
        return "this machine: no login node"
    result = backend.transport.run(["true"], timeout=timeout, idempotent=True)
    if not result.ok:
        raise ProbeFailedError(result.describe())
    return f"`true` ran on {backend.where}"


def _stat(backend: Backend, path: str, timeout: float) -> str:
    if path == "~" or path.startswith("~/"):
        try:
            path = backend.home + path[1:]
        except TransportError as error:
            raise ProbeFailedError(str(error)) from None
    result = backend.transport.run(
        ["stat", "-L", "-c", "%F", "--", path], timeout=timeout, idempotent=True
    )
    if not result.ok:
        raise ProbeFailedError(result.describe())
    kind = result.stdout.strip()
    if kind != "directory":
        raise ProbeFailedError(f"{path} is a {kind or 'thing stat cannot name'}, not a folder")
    return f"{path}: a folder"
