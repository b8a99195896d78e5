"""Telling a retry from a new request: the request's digest, and answers that say "replayed".

A submission or an update sent with an `Idempotency-Key` is recorded with the digest of its
request; a retry with the same key and digest is answered with what the first request made,
and the same key with another request is a conflict.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from iri_gateway.service.operations.store import JobRecord


@dataclass(frozen=True)
class Submission:
    """A submitted (or re-found) job and whether the idempotency key was seen before."""

    record: JobRecord
    replayed: bool


def request_hash(resource_id: str, spec: dict[str, Any]) -> str:
    """A stable digest of a submission request, to tell a retry from a different request."""
    text = json.dumps({"resource": resource_id, "spec": spec}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()
