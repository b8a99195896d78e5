"""The port proxy's door below HTTP: links, sessions, targets and connections.

The API asks it for a link (`link`), the proxy's origin exchanges a link's ticket for a
session (`open_session`) and, on every request, checks the session or the caller's token
(`check_session`), finds where the port is (`target`: the job's owner, its state, the
member's node as the scheduler says) and connects there through the resource's transport
(`connect`: directly from the gateway, or from the login node over SSH).
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from iri_gateway.models.cluster_ports import PLAIN_MEMBER
from iri_gateway.models.job import JobNodes
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.service.operations.backends import Backends
from iri_gateway.service.operations.store import JobRecord, JobStore
from iri_gateway.service.proxy import passes, targets, tickets
from iri_gateway.service.proxy.errors import (
    PortNotFoundError,
    PortNotOpenError,
    PortUnreachableError,
    ProxyOffError,
)
from iri_gateway.service.proxy.keys import gateway_key
from iri_gateway.service.proxy.limits import ProxyLimits
from iri_gateway.transport.base import TransportError

KEY_NAME = "port-proxy"
SERVICE_TOKEN_VARIABLE = "IRI_SERVICE_TOKEN"
PROXY_BASE_VARIABLE = "IRI_PROXY_BASE"
PROXY_PATH_VARIABLE_PREFIX = "IRI_PROXY_PATH_"
TUNNEL_PATH = "/_iri/tunnel"


@dataclass(frozen=True)
class ProxySettings:
    """The `proxy_*` settings the proxy uses."""

    url: str | None = None
    """The proxy's own origin (`https://jobs.example.org`); None: the proxy is off."""
    link_ttl: float = 60.0
    session_ttl: float = 12 * 3600.0
    connections_per_user: int = 64
    bytes_per_second: int = 64 * 2**20
    connect_timeout: float = 10.0
    nodes_ttl: float = 30.0


@dataclass(frozen=True)
class PortEntry:
    """One port of a job as getJob lists it: where the proxy serves it (None: proxy off)."""

    member: str
    name: str
    port: int
    url: str | None
    tunnel: str | None
    """The WebSocket URL of a raw TCP tunnel to the port (`iri-gateway jobs forward`)."""


@dataclass(frozen=True)
class Target:
    """Where one port of a running job is, and what its service is shown."""

    owner: str
    job_id: str
    resource_id: str
    member: str
    name: str
    port: int
    address: str
    prefix: str
    service_token: str
    account: str
    """The login account that runs the job (the proxy connects as it)."""


def prefix(job_id: str, member: str, name: str) -> str:
    """The path under which the proxy serves a port (no trailing slash)."""
    return f"/{job_id}/{member}/{name}"


def port_url(origin: str, job_id: str, member: str, name: str) -> str:
    """Where the proxy at `origin` serves a port."""
    return f"{origin.rstrip('/')}{prefix(job_id, member, name)}/"


def tunnel_url(origin: str, job_id: str, member: str, name: str) -> str:
    """The WebSocket URL of a raw TCP tunnel to a port on the proxy's `origin`."""
    scheme, _, rest = origin.partition("://")
    websocket = {"https": "wss", "http": "ws"}.get(scheme.lower(), scheme)
    return f"{websocket}://{rest.rstrip('/')}{TUNNEL_PATH}{prefix(job_id, member, name)}"


class PortProxy:
    """The port proxy of one gateway process."""

    def __init__(
        self,
        store: JobStore,
        registry: ProfileRegistry,
        backends: Backends,
        settings: ProxySettings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.registry = registry
        self.backends = backends
        self.settings = settings
        self.clock = clock
        self.limits = ProxyLimits(settings.connections_per_user, settings.bytes_per_second)
        self._key: bytes | None = None
        self._nodes: dict[str, tuple[float, JobNodes]] = {}
        self._lock = threading.Lock()

    # ---- keys and passes -------------------------------------------------------------

    @property
    def key(self) -> bytes:
        if self._key is None:
            self._key = gateway_key(self.store, KEY_NAME, self.clock)
        return self._key

    def service_token(self, job_id: str) -> str:
        return passes.service_token(self.key, job_id)

    def environment(self, job_id: str, spec: JobSpec) -> dict[str, str]:
        """What a job with service ports is told of the proxy: `IRI_SERVICE_TOKEN` (the
        token the proxy shows its services, `Authorization: token ...`), `IRI_PROXY_BASE`
        (`/<job>/`: a member's port is served under `<base><member>/<port>/`) and, for a
        job without roles, `IRI_PROXY_PATH_<NAME>` per port (its whole path, a service's
        base URL). Nothing for a job without ports."""
        plain = dict(spec.ports or {})
        if not plain and not any(role.ports for role in spec.roles or []):
            return {}
        variables = {
            SERVICE_TOKEN_VARIABLE: self.service_token(job_id),
            PROXY_BASE_VARIABLE: f"/{job_id}/",
        }
        for name in plain:
            path = f"{prefix(job_id, PLAIN_MEMBER, name)}/"
            variables[f"{PROXY_PATH_VARIABLE_PREFIX}{name.upper()}"] = path
        return variables

    def _origin(self) -> str:
        if self.settings.url is None:
            raise ProxyOffError(
                "this gateway has no port proxy: its operator has not given it an origin of "
                "its own (the setting proxy_url, docs/operations.md, Port proxy)"
            )
        return self.settings.url.rstrip("/")

    # ---- what the API asks -----------------------------------------------------------

    def entries(self, record: JobRecord) -> list[PortEntry]:
        """The job's ports, each with its address through the proxy."""
        origin = self.settings.url.rstrip("/") if self.settings.url else None
        return [
            PortEntry(
                port.member,
                port.name,
                port.port,
                port_url(origin, record.id, port.member, port.name) if origin else None,
                tunnel_url(origin, record.id, port.member, port.name) if origin else None,
            )
            for port in targets.declared(record)
        ]

    def ports(self, owner: str, resource_id: str, job_id: str) -> list[PortEntry]:
        """The ports of `owner`'s job `job_id` on `resource_id`; PortNotFoundError for any
        other job (another user's, or none)."""
        record = self.store.get(job_id)
        if record is None or record.owner != owner or record.resource_id != resource_id:
            raise PortNotFoundError(f"no job {job_id!r} of yours on {resource_id!r}")
        return self.entries(record)

    def link(self, owner: str, job_id: str, member: str, name: str) -> tuple[str, float]:
        """A link that opens the port in a browser (a ticket, valid `link_ttl` seconds),
        and when it expires. The port must be open now (409 before, 410 after)."""
        origin = self._origin()
        record = self.store.get(job_id)
        targets.find(record, owner, member, name)
        assert record is not None
        targets.check_open(record, member)
        expires = self.clock() + self.settings.link_ttl
        nonce = secrets.token_urlsafe(24)
        grant = passes.Pass("ticket", owner, job_id, member, name, expires, nonce)
        ticket = passes.sign(self.key, grant)
        query = urllib.parse.urlencode({"ticket": ticket})
        return f"{origin}/_iri/open?{query}", expires

    # ---- what the proxy's origin asks ------------------------------------------------

    def open_session(self, ticket: str) -> tuple[str, passes.Pass]:
        """A session for the ticket's port (the cookie's value) and what it grants; the
        ticket is spent (a second opening is refused)."""
        grant = passes.check(self.key, ticket, "ticket", self.clock())
        tickets.spend(self.store, grant, self.clock())
        session = passes.Pass(
            "session",
            grant.owner,
            grant.job_id,
            grant.member,
            grant.port,
            self.clock() + self.settings.session_ttl,
        )
        return passes.sign(self.key, session), session

    def check_session(self, value: str, job_id: str, member: str, name: str) -> str:
        """The owner a session cookie speaks for, when it is for this port."""
        grant = passes.check(self.key, value, "session", self.clock())
        if (grant.job_id, grant.member, grant.port) != (job_id, member, name):
            raise passes.PassRefusedError("this session is for another port")
        return grant.owner

    def target(self, owner: str, job_id: str, member: str, name: str) -> Target:
        """Where the port is now: PortNotFoundError, PortNotOpenError or PortClosedError
        when it may not be reached; the scheduler is asked where the job runs."""
        record = self.store.get(job_id)
        declared = targets.find(record, owner, member, name)
        assert record is not None
        targets.check_open(record, member)
        nodes = self._job_nodes(record)
        if member == PLAIN_MEMBER and not record.cluster_ports:
            node = nodes.batch_host
        else:
            view = targets.member_view(record, member) or {}
            node = str(view.get("node", ""))
        address = nodes.addresses.get(node)
        if address is None:
            raise PortUnreachableError(
                f"member {member} of job {job_id} says it runs on {node!r}, which is not "
                f"one of the job's nodes as the scheduler lists them "
                f"({', '.join(sorted(nodes.addresses))})"
            )
        return Target(
            owner,
            job_id,
            record.resource_id,
            member,
            name,
            declared.port,
            address,
            prefix(job_id, member, name),
            self.service_token(job_id),
            self.backends.job_account(self.registry.get(record.resource_id), record),
        )

    def _job_nodes(self, record: JobRecord) -> JobNodes:
        """The job's nodes, asked of its scheduler at most every `nodes_ttl` seconds."""
        now = time.monotonic()
        with self._lock:
            known = self._nodes.get(record.id)
        if known is not None and now - known[0] < self.settings.nodes_ttl:
            return known[1]
        if record.native_id is None:
            raise PortNotOpenError(f"job {record.id} has not reached its scheduler yet")
        loaded = self.registry.get(record.resource_id)
        backend = self.backends.for_job(loaded, record)
        nodes = backend.batch.nodes(record.native_id)
        if nodes is None:
            raise PortNotOpenError(
                f"job {record.id}'s scheduler does not show it running yet; try again in a moment"
            )
        with self._lock:
            self._nodes = {
                job: entry
                for job, entry in self._nodes.items()
                if now - entry[0] < self.settings.nodes_ttl
            }
            self._nodes[record.id] = (now, nodes)
        return nodes

    def connect(self, target: Target) -> socket.socket:
        """A connection to the target's port, made where its resource's transport runs
        commands (this machine, or the login node); PortUnreachableError when refused."""
        loaded = self.registry.get(target.resource_id)
        transport = self.backends.for_account(loaded, target.account).transport
        try:
            upstream = transport.tunnel(
                target.address, target.port, timeout=self.settings.connect_timeout
            )
        except TransportError as error:
            raise PortUnreachableError(
                f"port {target.name} ({target.port}) of member {target.member} of job "
                f"{target.job_id} on {target.address} did not answer: {error}"
            ) from None
        if upstream.family in (socket.AF_INET, socket.AF_INET6):
            # Bytes go on as they come: with Nagle's algorithm a small write on a kept-alive
            # stream (a tunnel, a WebSocket) waits for the service's delayed ACK, 40 ms on
            # Linux (benchmarks/port_proxy.py measured it).
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return upstream

    def still_open(self, job_id: str, member: str) -> bool:
        """Whether the member still runs, as the store says now."""
        return targets.open_now(self.store.get(job_id), member)
