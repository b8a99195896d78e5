"""Where scheduler commands run: this machine or a login node over SSH."""

from iri_gateway.transport.base import CommandResult, Transport, TransportError
from iri_gateway.transport.local import LocalTransport

__all__ = ["CommandResult", "LocalTransport", "Transport", "TransportError"]
