"""Changing a job the scheduler has: cancel, update (the IRI `PUT`) and restart.

A cancel is desired state: the intent is stored first, then a submitter worker tells the
scheduler, and what could not be delivered (an outage) is sent again by the reconcile
(`recovery`). An update and a restart are checked here and sent by a worker; they are not
stored as intents, so an undelivered one is reported, not retried.
"""

from __future__ import annotations

import logging
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, replace
from typing import Any

from iri_gateway.errors import GatewayError, SchedulerError, SchedulerUnavailableError
from iri_gateway.models.job import JobState
from iri_gateway.models.jobspec import JobAttributes
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.planning.planner import make_plan
from iri_gateway.schedulers.batch import JobChanges
from iri_gateway.service.jobs.context import JobsContext
from iri_gateway.service.jobs.errors import IdempotencyConflictError, JobNotChangeableError
from iri_gateway.service.jobs.idempotency import Submission, request_hash
from iri_gateway.service.operations.backends import Backend
from iri_gateway.service.operations.store import JobRecord
from iri_gateway.tracing import scheduler_span
from iri_gateway.transport.base import TransportError

log = logging.getLogger(__name__)


class Changes:
    """Cancels, updates and restarts of the jobs of every resource."""

    def __init__(self, context: JobsContext) -> None:
        self.context = context

    # ---- cancel ----------------------------------------------------------------------------

    def cancel(self, *, owner: str, job_id: str, wait: float | None = None) -> JobRecord:
        """Record the intent, then have the submitter tell the scheduler; the poller sees
        the job end. Waits `wait` seconds (None: until the scheduler answered) for it.

        The intent is stored first, so a cancel that cannot be delivered now (the scheduler
        unavailable, the login node unreachable) is not lost: the job's message says so and
        the continuous reconcile sends the cancel again until the scheduler takes it —
        nobody has to ask twice. The scheduler's refusal within the wait is raised.
        """
        context = self.context
        record = context.owned(owner, job_id)
        if record.state.final:
            return record
        record = context.store.request_cancel(record.id)
        delivery = context.submitter.run(
            record.resource_id, lambda: self._deliver_cancel(record.id)
        )
        return context.awaited(delivery, record.id, wait)

    def _deliver_cancel(self, job_id: str) -> JobRecord:
        """A recorded cancel sent on a submitter worker; an outage leaves it recorded (the
        message says it is not delivered yet) for the reconcile to send again."""
        record = self.context.current(job_id)
        if record.state.final:
            return record
        try:
            return self.send_cancel(record)
        except (SchedulerUnavailableError, TransportError):
            return self.context.current(job_id)

    def send_cancel(self, record: JobRecord) -> JobRecord:
        """Deliver a recorded cancel; once the scheduler has answered, the reconcile leaves it.

        A job without a native id is canceled here unless it is being sent right now or its
        submission's outcome is still unsettled (younger than `settle_time`): then the intent
        waits for the submission, or for the reconcile once the scheduler's answer is sure.
        """
        context = self.context
        loaded = context.registry.get(record.resource_id)
        backend = context.backends.for_job(loaded, record)
        if record.native_id is not None:
            return self._cancel_native(record, backend)
        if context.unsettled_submission(record, context.settle_time) or not context.store.claim(
            record.id, context.replica.id, live=context.replica.live()
        ):
            return context.store.transition(
                record.id,
                record.state,
                "cancel requested; it is sent once the submission's outcome is known",
            )
        try:  # held: no replica submits it while it is looked up and canceled
            return self._cancel_native(context.current(record.id), backend)
        finally:
            context.store.release(record.id, context.replica.id)

    def _cancel_native(self, record: JobRecord, backend: Backend) -> JobRecord:
        """Cancel the job the scheduler has (found by its tag when no native id is known),
        or end it canceled when the scheduler never had it."""
        store = self.context.store
        try:
            native_id = record.native_id or backend.batch.find(record.tag)
            if native_id is None:
                return store.transition(
                    record.id, JobState.CANCELED, "canceled before it reached the scheduler"
                )
            kind = self.context.registry.get(record.resource_id).resource.scheduler.kind
            with scheduler_span("cancel", record.resource_id, kind):
                backend.batch.cancel(native_id)
        except (SchedulerUnavailableError, TransportError) as error:
            store.transition(
                record.id,
                record.state,
                f"cancel requested, not delivered yet (sent again later): {error}",
            )
            raise
        except SchedulerError:
            store.mark_cancel_sent(
                record.id
            )  # the scheduler answered: sending again changes nothing
            raise
        if record.native_id is None:
            store.set_native_id(record.id, native_id, f"found as {native_id}")
        return store.transition(
            record.id,
            record.state if record.state != JobState.NEW else JobState.QUEUED,
            "cancel requested",
            cancel_sent=True,
        )

    # ---- update ----------------------------------------------------------------------------

    def update(
        self,
        *,
        owner: str,
        job_id: str,
        changes: JobChanges,
        wait: float | None = None,
        idempotency_key: str | None = None,
        request: dict[str, Any] | None = None,
    ) -> Submission:
        """The IRI update operation, for a job still waiting in the queue.

        The changes are checked here, then sent by a submitter worker; the answer waits
        `wait` seconds (None: until the scheduler answered). Within the wait a refusal or an
        outage is raised as it is; after it, the job's message says how the update went.
        Unlike a submission or a cancel, the changes are not stored: an update the
        scheduler could not be told is not sent again by itself.

        With an idempotency key, a retry (the same key, job and `request`, the body as sent)
        is answered with the job as it is now, and the scheduler is not told again; the same
        key with another request is an IdempotencyConflictError.
        """
        context = self.context
        store = context.store
        record = context.owned(owner, job_id)
        digest = request_hash(
            f"{record.resource_id}/{job_id}", {"request": request, "changes": asdict(changes)}
        )
        if idempotency_key is not None:
            earlier = store.update_key(owner, idempotency_key)
            if earlier is not None:
                return self._update_replayed(earlier, digest, idempotency_key, job_id)
        native_id = record.native_id
        if record.state not in (JobState.QUEUED, JobState.HELD) or native_id is None:
            raise JobNotChangeableError(
                f"job {job_id} is {record.state.value}; only queued jobs can be changed"
            )
        loaded = context.registry.get(record.resource_id)
        _check_changes(record, loaded, changes)
        backend = context.backends.for_job(loaded, record)
        if idempotency_key is not None:
            earlier = store.claim_update_key(owner, idempotency_key, job_id, digest)
            if earlier is not None:  # a concurrent retry recorded the key first
                return self._update_replayed(earlier, digest, idempotency_key, job_id)

        def send() -> JobRecord:
            try:
                backend.batch.update(native_id, changes)
            except GatewayError as error:
                store.transition(
                    record.id, context.current(record.id).state, f"update not applied: {error}"
                )
                raise
            return store.transition(record.id, context.current(record.id).state, "updated")

        sent = context.submitter.run(record.resource_id, send)
        try:
            return Submission(sent.result(timeout=wait), replayed=False)
        except FutureTimeout:
            return Submission(
                replace(context.current(record.id), message="update being sent to the scheduler"),
                replayed=False,
            )

    def _update_replayed(self, earlier: str, digest: str, key: str, job_id: str) -> Submission:
        """The answer to an update whose key was recorded before: the job as it is now, or
        IdempotencyConflictError when the key came with another request."""
        if earlier != digest:
            raise IdempotencyConflictError(
                f"idempotency key {key!r} was used for a different request"
            )
        return Submission(self.context.current(job_id), replayed=True)

    # ---- restart ---------------------------------------------------------------------------

    def restart(self, *, owner: str, job_id: str, wait: float | None = None) -> JobRecord:
        """Run the job again under the same gateway job and native id: Slurm `scontrol
        requeue`, PBS `qrerun`, the local scheduler's own restart; a cluster job's script,
        and so every member, starts over. A running job is stopped first. The job goes back
        to `queued`, and its history keeps the earlier run and the restart.

        The scheduler's refusal (a job it no longer holds, PBS's finished jobs) is raised
        with its words; a job not yet sent to the scheduler cannot be restarted.
        """
        context = self.context
        record = context.owned(owner, job_id)
        native_id = record.native_id
        if native_id is None or record.state == JobState.NEW:
            raise JobNotChangeableError(
                f"job {job_id} is {record.state.value} and has not reached the scheduler; "
                "only a job the scheduler has run or runs can be restarted"
            )
        backend = context.backends.for_job(context.registry.get(record.resource_id), record)

        def send() -> JobRecord:
            command = backend.batch.requeue(native_id)
            runs = 1 + sum(
                1
                for entry in record.history
                if str(entry.get("message", "")).startswith("restart ")
            )
            return context.store.restarted(record.id, f"restart {runs}: {command}")

        sent = context.submitter.run(record.resource_id, send)
        try:
            return sent.result(timeout=wait)
        except FutureTimeout:
            return replace(
                context.current(record.id), message="restart being sent to the scheduler"
            )


def _check_changes(record: JobRecord, loaded: LoadedResource, changes: JobChanges) -> None:
    """The job as changed must be one the resource would accept: a known queue, a
    duration within its limit, names without NUL or control characters (they reach the
    scheduler's command line). JobRejectedError, every problem listed, otherwise."""
    current = record.effective_spec_model
    updates = {
        "duration": changes.duration,
        "queue_name": changes.queue_name,
        "account": changes.account,
    }
    attributes = (current.attributes or JobAttributes()).model_copy(
        update={k: v for k, v in updates.items() if v is not None}
    )
    changed = current.model_copy(update={"attributes": attributes})
    if changes.name is not None:
        changed = changed.model_copy(update={"name": changes.name})
    make_plan(changed, loaded)
