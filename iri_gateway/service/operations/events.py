"""Background actions as log lines with a stable `event` name and fields.

A line about a job, a submission, a reconcile decision, a task or a replica's lease is one
`event(...)` call: the `event` name never changes between releases (collectors and alerts key
on it), the fields are named values (`job`, `resource`, `state`, ...), and the message is
the same facts for a person. The names in use, with their fields, are listed in
docs/operations.md "Logs"; a line written inside a request carries its `request_id` too.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from iri_gateway.service.operations.request_context import request_id

if TYPE_CHECKING:
    from iri_gateway.service.operations.store import JobRecord

JOB_STATE = "job.state_changed"
SUBMISSION_SENT = "submission.sent"
SUBMISSION_RETRY = "submission.retry"
SUBMISSION_FAILED = "submission.failed"
SUBMISSION_UNKNOWN = "submission.outcome_unknown"
RECONCILE = "reconcile.decision"
POLL_FAILED = "poll.failed"
TASK_STARTED = "task.started"
TASK_ENDED = "task.ended"
LEASE_TAKEN = "lease.taken_over"
LEASE_HANDED = "lease.handed_over"
SERVE_STARTED = "serve.started"


def event(
    logger: logging.Logger,
    name: str,
    message: str,
    *,
    level: int = logging.INFO,
    exc_info: bool = False,
    **fields: Any,
) -> None:
    """Log MESSAGE as event NAME with FIELDS (and the request id, inside a request)."""
    if not logger.isEnabledFor(level):
        return
    current = request_id()
    if current is not None:
        fields.setdefault("request_id", current)
    logger.log(level, "%s", message, extra={"event": name, **fields}, exc_info=exc_info)


def job_fields(record: JobRecord) -> dict[str, Any]:
    """The fields naming a job in every line about it: its id, owner and resource."""
    return {"job": record.id, "user": record.owner, "resource": record.resource_id}
