"""Why the port proxy will not reach a port: each refusal one class, its status at the API
(`api/plumbing/problems.py`)."""

from __future__ import annotations

from iri_gateway.errors import GatewayError


class PortNotFoundError(GatewayError):
    """No such job of the caller's, no such member, or a port the job did not declare: one
    answer for all three, so nobody learns which of another user's jobs exist (404)."""

    code = "port_not_found"


class PortNotOpenError(GatewayError):
    """The member does not run yet (the job waits in the queue, or its members are not all
    started): asked again later, it may open (409)."""

    code = "port_not_open"


class PortClosedError(GatewayError):
    """The job, or the member, has ended: its ports are gone for good (410)."""

    code = "port_closed"


class ProxyOffError(GatewayError):
    """The operator has not given the proxy an origin of its own (`proxy_url`) (501)."""

    code = "proxy_off"


class ProxyLimitError(GatewayError):
    """The caller has as many proxied connections open as the operator allows (429)."""

    code = "proxy_limit"


class PortUnreachableError(GatewayError):
    """The member runs, but nothing answered on its port (refused, or the connection could
    not be made from where the gateway connects) (502)."""

    code = "port_unreachable"
