"""The refusals of the job service, each with its stable code (`iri_gateway.errors`).

They live apart from the parts of the engine that raise them, so that every part (and the
API's one mapping to problems) can name them without importing another part.
"""

from __future__ import annotations

from iri_gateway.errors import GatewayError


class JobNotFoundError(GatewayError):
    """No job with that id belongs to the caller (another user's job is 'not found' too)."""

    code = "job_not_found"


class IdempotencyConflictError(GatewayError):
    """The idempotency key was used before with a different request."""

    code = "idempotency_conflict"


class JobNotChangeableError(GatewayError):
    """The job is past the point where it can be changed or cancelled."""

    code = "job_not_changeable"


class NotArrayElementsError(GatewayError):
    """Indices asked of an array job that are not its elements."""

    code = "not_array_elements"


class OutputUnavailableError(GatewayError):
    """The job's output file does not exist (yet) or cannot be read."""

    code = "output_unavailable"
