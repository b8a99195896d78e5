"""Build, per resource and gateway user, the batch system and transport that run their jobs.

Which remote account runs a user's work comes from the profile's user mapping and account
rules, and a job keeps the account it was submitted as; a user with no account on an SSH
resource is refused, never run under some default account.
"""

from __future__ import annotations

import os
import posixpath
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from sqlalchemy.engine import make_url

from iri_gateway.errors import GatewayError
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.schedulers import SCHEDULERS
from iri_gateway.schedulers.batch import BatchSystem
from iri_gateway.service.files.agents import AgentLimits, Agents
from iri_gateway.service.operations.metrics import Metrics
from iri_gateway.transport.base import Transport, TransportError
from iri_gateway.transport.local import LocalTransport
from iri_gateway.transport.ssh import SshTransport
from iri_gateway.transport.ssh_certificates import (
    CaKeySigner,
    CommandSigner,
    Signer,
    UserCertificates,
    route_address,
)

NO_CLAIMS: Mapping[str, Any] = MappingProxyType({})
"""The claims of a caller whose identity says nothing more than its name."""


class RecordedJob(Protocol):
    """What tells which account runs a recorded job (`JobRecord`, `PollEntry`)."""

    @property
    def owner(self) -> str: ...

    @property
    def account(self) -> str | None: ...


class NoAccountError(GatewayError):
    """The gateway user has no account on the resource's login node."""

    code = "no_account"


class Backend:
    """How one user's jobs run on one resource: the batch system, the transport, and where
    job folders go.

    `work_root` is always absolute, so the directory a client is given works in the
    filesystem operations: a relative or `~` root (the default over SSH is
    `~/iri-gateway-jobs`) is taken from the account's home, which is asked for once, when
    first needed. `reserved` are the gateway's own folders, never reachable through a root.
    """

    def __init__(
        self,
        batch: BatchSystem,
        transport: Transport,
        *,
        work_root: str,
        in_process: bool,
        private: tuple[str, ...] = (),
        where: str = "",
        agents: Agents | None = None,
        account: str = "",
    ) -> None:
        self.batch = batch
        self.account = account
        """The login account it acts as ('' the gateway's own)."""
        self.transport = transport
        self.in_process = in_process
        """True when commands run as the gateway's own account on this machine (its home
        and relative job roots are then this process's)."""
        self.where = where
        self.agents = agents or Agents(transport, where=where, limits=AgentLimits())
        """Where file work runs: always a separate agent process with limits (`agents`)."""
        self._work_root_setting = work_root
        self._private = private
        self._home: str | None = None
        self._lock = threading.Lock()

    @property
    def home(self) -> str:
        """The account's home directory (asked once; over SSH, from the login node)."""
        with self._lock:
            if self._home is None:
                self._home = self._find_home()
            return self._home

    def _find_home(self) -> str:
        if self.in_process:
            found = os.path.expanduser("~")
        else:
            result = self.transport.run(["printenv", "HOME"], timeout=30, idempotent=True)
            found = result.stdout.strip() if result.ok else ""
            if not found:
                raise TransportError(
                    f"cannot find the home directory on {self.where}: {result.describe()}"
                )
        if not found.startswith("/") or "\0" in found or "\n" in found:
            raise TransportError(
                f"the home directory on {self.where} is not an absolute path: {found!r}"
            )
        return posixpath.normpath(found)

    @property
    def work_root(self) -> str:
        """Where jobs that name no directory get theirs: absolute and normalised."""
        setting = self._work_root_setting
        if setting == "~" or setting.startswith("~/"):
            return posixpath.normpath(self.home + "/" + setting[1:])
        if setting.startswith("/"):
            return posixpath.normpath(setting)
        if self.in_process:
            return os.path.abspath(setting)  # where local commands run: our own directory
        return posixpath.normpath(posixpath.join(self.home, setting))

    @property
    def reserved(self) -> tuple[str, ...]:
        """The gateway's own files and folders where this backend's files are: its job root,
        `gateway_files` (store, tokens, SSH keys: over SSH too, as the login node may share
        the gateway's filesystem) and, locally, its data directory."""
        return (self.work_root, *self._private)


def gateway_files(*, store_url: str, tokens: Path, ssh_files: Iterable[str]) -> tuple[str, ...]:
    """The files the gateway keeps on its own machine, wherever they are configured: the
    tokens file and its lock, the SQLite store with its `-wal`, `-shm` and `-journal` (when
    the store is SQLite), and the SSH keys and known_hosts files the profiles name. Absolute;
    those that do not exist yet are refused by name (and by identity once they do)."""
    found = [str(tokens), f"{tokens}.lock"]
    url = make_url(store_url)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        database = str(url.database)
        found += [database, f"{database}-wal", f"{database}-shm", f"{database}-journal"]
    found += [os.path.expanduser(path) for path in ssh_files]
    return tuple(dict.fromkeys(os.path.abspath(path) for path in found))


class Backends:
    """A cache of backends: one SSH connection per (resource, account), reused.
    `gateway_files` (see `gateway_files`) are reserved on local resources beside the data
    directory; `agent_limits` are the file agents' limits (`files.agents`)."""

    def __init__(
        self,
        data_dir: Path,
        gateway_files: tuple[str, ...] = (),
        agent_limits: AgentLimits | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.metrics = metrics or Metrics()
        self.gateway_files = gateway_files
        self.agent_limits = agent_limits or AgentLimits()
        self._cache: dict[tuple[str, str], Backend] = {}
        self._signers: dict[str, Signer] = {}
        self._lock = threading.Lock()

    def account(
        self, loaded: LoadedResource, owner: str, claims: Mapping[str, Any] = NO_CLAIMS
    ) -> str:
        """The account that runs the work of `owner`, whose identity says `claims` ('' for
        the gateway's own account): the resource's `user_mapping`, then its account rules
        (`SshConnection.account_of`). NoAccountError when neither gives one."""
        connection = loaded.resource.connection
        if connection.mode != "ssh" or connection.ssh is None:
            return ""
        mapped = connection.ssh.account_of(owner, claims)
        if mapped is None:
            # Not who is mapped, nor the rules: neither is the caller's to learn.
            raise NoAccountError(
                f"user {owner!r} has no account on {loaded.id}; the facility maps users to "
                "login accounts in the resource's profile (connection.ssh.user_mapping and "
                "account_rules): ask its administrators for one"
            )
        return mapped

    def job_account(self, loaded: LoadedResource, job: RecordedJob) -> str:
        """The account that runs `job`: the one recorded at its submission, or, for a job
        recorded before accounts were, its owner's by name."""
        return job.account if job.account is not None else self.account(loaded, job.owner)

    def get(
        self, loaded: LoadedResource, owner: str, claims: Mapping[str, Any] = NO_CLAIMS
    ) -> Backend:
        """The backend of `owner`'s work on the resource, as `account` maps them."""
        return self.for_account(loaded, self.account(loaded, owner, claims))

    def for_job(self, loaded: LoadedResource, job: RecordedJob) -> Backend:
        """The backend of the account that runs `job` (`job_account`)."""
        return self.for_account(loaded, self.job_account(loaded, job))

    def for_account(self, loaded: LoadedResource, account: str) -> Backend:
        """The backend that acts as `account` on the resource (one per pair, kept)."""
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
                host=ssh.host,
                port=ssh.port,
                username=account,
                known_hosts=ssh.known_hosts,
                key_file=ssh.key_file,
                max_sessions=ssh.max_sessions_per_connection,
                max_connections=ssh.max_connections,
                credentials=self._certificates(loaded, account),
            )
            default_root = "~/iri-gateway-jobs"
            # The gateway's own files (store, tokens, keys), should the login node share its
            # filesystem: looked for there by the same paths (where they are not, nothing is
            # reserved). Not its data directory: jobs there may name folders beside it.
            private: tuple[str, ...] = self.gateway_files
            where = f"{loaded.id} ({account}@{ssh.host})"
        else:
            transport = LocalTransport()
            default_root = str(self.data_dir / "work" / resource.id)
            private = (os.path.abspath(self.data_dir), *self.gateway_files)
            where = f"{loaded.id} (this machine)"
        work_root = connection.work_root or default_root
        scheduler = SCHEDULERS[resource.scheduler.kind]
        batch = self.metrics.measured(
            loaded.id,
            scheduler.batch_factory(
                transport=transport, config=resource.scheduler, data_dir=self.data_dir
            ),
        )
        # Agents are kept started only where starting and keeping a command is cheap.
        here = transport.offers.as_gateway
        agents = Agents(
            transport,
            where=where,
            limits=self.agent_limits,
            warm=self.agent_limits.warm if here and transport.offers.streams else 0,
        )
        return Backend(
            batch,
            transport,
            work_root=work_root,
            in_process=here,
            private=private,
            where=where,
            agents=agents,
            account=account,
        )

    def _certificates(self, loaded: LoadedResource, account: str) -> UserCertificates | None:
        """The account's certificates on the resource, when its profile has the gateway
        sign them (`connection.ssh.certificates`); one signer per resource."""
        ssh = loaded.resource.connection.ssh
        if ssh is None or ssh.certificates is None:
            return None
        settings = ssh.certificates
        signer = self._signers.get(loaded.id)
        if signer is None:
            signer = self._signers[loaded.id] = (
                CaKeySigner(settings.ca_key, port_forwarding=settings.port_forwarding)
                if settings.ca_key is not None
                else CommandSigner(settings.sign_command or [])
            )
        host, port = ssh.host, ssh.port
        return UserCertificates(
            signer,
            account,
            validity=settings.validity,
            addresses=lambda: settings.source_addresses or route_address(host, port),
        )

    def ssh_usage(self) -> dict[str, tuple[int, int]]:
        """Per resource: open SSH connections and sessions in use, over its accounts."""
        with self._lock:
            backends = list(self._cache.items())
        usage: dict[str, tuple[int, int]] = {}
        for (resource_id, _), backend in backends:
            used = backend.transport.usage()
            if used is not None:
                before = usage.get(resource_id, (0, 0))
                usage[resource_id] = (before[0] + used[0], before[1] + used[1])
        return usage

    def close(self) -> None:
        with self._lock:
            for backend in self._cache.values():
                backend.agents.close()
                backend.transport.close()
            self._cache.clear()
