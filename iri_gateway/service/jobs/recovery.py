"""Finishing what was left half-done: the reconcile, at start-up and on every poller cycle.

At start-up it finishes what a crash interrupted; from the poller, continuously, what the
running process could not finish (a submission whose outcome is unknown, a cancel the
scheduler could not be told): a record without a native id is looked up by its tag and
adopted, and resubmitted only when the scheduler surely never saw it; a cancel that may not
have reached the scheduler is sent again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import TimeoutError as FutureTimeout

from iri_gateway.errors import GatewayError, SchedulerError, SchedulerUnavailableError
from iri_gateway.models.job import JobState
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.service.jobs.attempts import Attempts
from iri_gateway.service.jobs.changes import Changes
from iri_gateway.service.jobs.context import JobsContext
from iri_gateway.service.operations import events
from iri_gateway.service.operations.backends import Backend
from iri_gateway.service.operations.events import event, job_fields
from iri_gateway.service.operations.store import JobRecord, PollEntry
from iri_gateway.transport.base import TransportError

log = logging.getLogger(__name__)


class Recovery:
    """The reconcile: adopts, resubmits, gives up or cancels again what is unsettled."""

    def __init__(self, context: JobsContext, attempts: Attempts, changes: Changes) -> None:
        self.context = context
        self.attempts = attempts
        self.changes = changes

    def reconcile(
        self, records: Sequence[JobRecord | PollEntry] | None = None, *, settle: float = 0.0
    ) -> list[str]:
        """Finish what was left half-done; returns one line per action taken.

        At start-up it finishes what a crash interrupted; the poller runs it every few seconds
        for what the running process could not finish: submissions whose outcome is unknown,
        cancels that could not be delivered. The server passes `settle` = `settle_time` both
        times (a crashed process's last command may still be running); 0 settles at once.
        `records` are the unsettled jobs when the caller has read them already (the
        poller's light `PollEntry` values do: a record is read in full only when it needs an
        action).

        A submission this engine is sending right now is skipped. One whose last attempt is
        younger than `settle` seconds is adopted if the scheduler shows it, but neither
        resubmitted nor given up: a command whose answer was lost may still be running on the
        login node, and only once it cannot be does "the scheduler does not have it" mean "it
        never saw it". A cancel the scheduler has answered is not sent again. When the
        scheduler or the login node fails (still unavailable), the records of the same
        resource and account are left for the next round, which tries again.
        """
        context = self.context
        store = context.store
        actions: list[str] = []
        unsettled = records if records is not None else store.poll_entries()
        unavailable: set[tuple[str, str]] = set()
        live: list[str] | None = None
        for listed in unsettled:
            if not self._needs_reconcile(listed):
                continue
            record = store.get(listed.id)  # the latest: the list may be a moment old
            if record is None or record.state.final or not self._needs_reconcile(record):
                continue
            try:
                loaded = context.registry.get(record.resource_id)
                where = (record.resource_id, context.backends.job_account(loaded, record))
            except GatewayError as error:  # the profile no longer has the resource or user
                _decided(actions, record, f"left for later: {error}")
                continue
            if where in unavailable:
                continue
            try:
                backend = context.backends.for_job(loaded, record)
                if record.native_id is None:
                    if live is None:
                        live = context.replica.live()
                    if not store.claim(record.id, context.replica.id, live=live):
                        continue  # another live replica is sending it
                    try:
                        record = context.current(record.id)  # as it is now that it is held
                        action = (
                            None
                            if record.native_id is not None or record.state.final
                            else self._recover_submission(record, loaded, backend, settle)
                        )
                    finally:
                        # handed over to the submitter: the claim is its to end
                        if not context.in_flight.sending(record.id):
                            store.release(record.id, context.replica.id)
                    if action is not None:
                        _decided(actions, record, action)
                else:
                    self.changes.send_cancel(record)
                    _decided(actions, record, "cancel sent again")
            except (SchedulerUnavailableError, TransportError) as error:
                unavailable.add(where)
                _decided(actions, record, f"left for later: {error}")
            except GatewayError as error:
                _decided(actions, record, f"left for later: {error}")
        return actions

    def _needs_reconcile(self, record: JobRecord | PollEntry) -> bool:
        """A cancel the scheduler has not answered yet, or a submission this engine is not
        sending now (whether another replica is: `claim` decides)."""
        if record.native_id is not None:
            return record.desired == "canceled" and not record.cancel_sent
        return not self.context.in_flight.sending(record.id)

    def _recover_submission(
        self, record: JobRecord, loaded: LoadedResource, backend: Backend, settle: float
    ) -> str | None:
        """Adopt the job if the scheduler has it; otherwise, once the attempt is older than
        `settle`, cancel, resubmit or give it up. None when there is nothing to do yet."""
        context = self.context
        store = context.store
        native_id = backend.batch.find(record.tag)
        if native_id is not None:
            store.set_native_id(record.id, native_id, f"adopted {native_id}, found by its tag")
            if record.desired == "canceled":
                backend.batch.cancel(native_id)
                store.mark_cancel_sent(record.id)
            return f"{record.id}: adopted {native_id}"
        if context.unsettled_submission(record, settle):
            return None
        if record.desired == "canceled":
            store.transition(record.id, JobState.CANCELED, "canceled before submission")
            return f"{record.id}: canceled before submission"
        window = loaded.resource.scheduler.history_window
        attempted = record.submit_attempted_at
        if attempted is None or context.clock() - attempted < window:
            # The submitter sends it (staging may take an hour: never on the poller's thread),
            # with its retries; the reconcile waits a moment for the common, quick case.
            context.in_flight.claim(record.id)
            attempt = self.attempts.dispatch(record.id, record.resource_id, attempt=1)
            try:
                sent = attempt.result(timeout=context.resubmit_wait)
            except FutureTimeout:
                return f"{record.id}: being resubmitted by the submitter"
            except SchedulerError:
                return f"{record.id}: resubmission refused by the scheduler"
            if sent.native_id is None:
                return f"{record.id}: not resubmitted yet: {sent.message}"
            return f"{record.id}: resubmitted (the scheduler never saw it)"
        store.transition(
            record.id,
            JobState.FAILED,
            "lost: the submission may have reached the scheduler, which no longer shows it",
        )
        return f"{record.id}: marked lost"


def _decided(actions: list[str], record: JobRecord, decision: str) -> None:
    """Record the reconcile's DECISION about RECORD: in ACTIONS (`job id: decision`, as
    `reconcile` returns them) and as a `reconcile.decision` line."""
    line = decision if decision.startswith(f"{record.id}: ") else f"{record.id}: {decision}"
    actions.append(line)
    event(
        log,
        events.RECONCILE,
        f"reconcile: {line}",
        **job_fields(record),
        decision=line.removeprefix(f"{record.id}: "),
    )
