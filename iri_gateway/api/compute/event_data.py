"""An event of the log as clients receive it: the `data` of a stream's event, and the body
of a webhook delivery (one rendering for both, so they never disagree).

The job (or task) is shown as getJob (getTask) shows it now, beside the change the event
records (not for an array's element, whose event is the change alone): an event read late
(a stream resuming) still says which state it was about, while `job` says where the job is
since.
"""

from __future__ import annotations

from typing import Any

from iri_gateway.api.compute.models import job_document
from iri_gateway.api.tasks.models import task_view
from iri_gateway.service.events.log import ELEMENT, JOB, MEMBER, TASK, StoredEvent
from iri_gateway.service.jobs.engine import Engine, JobNotFoundError


def event_data(engine: Engine, event: StoredEvent) -> dict[str, Any]:
    """The event as JSON (reads the job or task: call it off the event loop)."""
    data: dict[str, Any] = {
        "id": event.id,
        "type": event.kind,
        "time": event.at,
        "state": event.state,
        "previous": event.previous,
    }
    if event.kind == ELEMENT and event.job_id is not None and event.member is not None:
        # An array's elements may change by the thousand: their events carry the change
        # alone (the index, the exit code in `message`); the array's own `job` events carry
        # the job, its counts included.
        data["job_id"] = event.job_id
        data["resource_id"] = event.resource_id
        data["element"] = int(event.member)
        data["message"] = event.message
    elif event.kind in (JOB, MEMBER) and event.job_id is not None:
        data["job_id"] = event.job_id
        data["resource_id"] = event.resource_id
        if event.kind == MEMBER:
            data["member"] = event.member
        else:
            data["message"] = event.message
        try:  # the job of the event's owner only, as getJob reads it
            record = engine.get(owner=event.owner, job_id=event.job_id)
        except JobNotFoundError:  # gone since (the store's retention)
            pass
        else:
            data["job"] = job_document(
                record, include_spec=False, ports_origin=engine.proxy.settings.url
            )
    elif event.kind == TASK and event.task_id is not None:
        data["task_id"] = event.task_id
        task = engine.tasks.get(event.owner, event.task_id)
        if task is not None:
            data["task"] = task_view(task).model_dump(mode="json", exclude_none=True)
    return data
