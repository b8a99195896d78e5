"""Build, per resource and gateway user, the batch system and transport that run their jobs.

Which remote account runs a user's job comes from the profile's user mapping; a user with no
mapping on an SSH resource is refused, never run under some default account.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from iri_gateway.errors import GatewayError
from iri_gateway.models.profile import LoadedResource
from iri_gateway.schedulers.batch import BatchSystem
from iri_gateway.schedulers.local_batch import LocalBatch
from iri_gateway.schedulers.slurm.batch import SlurmBatch
from iri_gateway.transport.base import Transport
from iri_gateway.transport.local import LocalTransport
from iri_gateway.transport.ssh import SshTransport


class NoAccountError(GatewayError):
    """The gateway user has no account on the resource's login node."""

    code = "no_account"


@dataclass(frozen=True)
class Backend:
    """How one user's jobs run on one resource."""

    batch: BatchSystem
    transport: Transport
    work_root: str


class Backends:
    """A cache of backends: one SSH connection per (resource, account), reused."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._cache: dict[tuple[str, str], Backend] = {}
        self._lock = threading.Lock()

    def account(self, loaded: LoadedResource, owner: str) -> str:
        """The account that runs `owner`'s jobs ('' for the gateway's own account)."""
        connection = loaded.resource.connection
        if connection.mode != "ssh" or connection.ssh is None:
            return ""
        mapped = connection.ssh.user_mapping.get(owner)
        if mapped is None:
            raise NoAccountError(
                f"user {owner!r} has no account on {loaded.id}; the profile maps: "
                f"{', '.join(sorted(connection.ssh.user_mapping)) or 'nobody'}"
            )
        return mapped

    def get(self, loaded: LoadedResource, owner: str) -> Backend:
        account = self.account(loaded, owner)
        key = (loaded.id, account)
        with self._lock:
            if key not in self._cache:
                self._cache[key] = self._build(loaded, account)
            return self._cache[key]

    def _build(self, loaded: LoadedResource, account: str) -> Backend:
        resource = loaded.resource
        connection = resource.connection
        transport: Transport
        if connection.mode == "ssh" and connection.ssh is not None:
            ssh = connection.ssh
            transport = SshTransport(
                host=ssh.host, port=ssh.port, username=account,
                known_hosts=ssh.known_hosts, key_file=ssh.key_file,
            )
            default_root = "iri-gateway-jobs"
        else:
            transport = LocalTransport()
            default_root = str(self.data_dir / "work" / resource.id)
        work_root = connection.work_root or default_root
        kind = resource.scheduler.kind
        batch: BatchSystem
        if kind == "slurm":
            batch = SlurmBatch(transport, history=resource.scheduler.history)
        elif kind == "local":
            batch = LocalBatch(self.data_dir / "local-jobs")
        else:
            from iri_gateway.schedulers.pbs.batch import PbsBatch

            batch = PbsBatch(transport)
        return Backend(batch, transport, work_root)

    def close(self) -> None:
        with self._lock:
            for backend in self._cache.values():
                backend.transport.close()
            self._cache.clear()
