"""Bulk launch: many JobSpecs of one user for one resource in one call, each its own job.

Why: a parameter sweep sent as N launchJob calls costs N requests, N commits and N waits,
and workflow tools that loop over single launches time out. Here the specs of one call are
each checked and planned on their own — one that cannot run is refused by its index and
never fails the others — then recorded together in one transaction, and sent by the
submitter in parallel.

What each spec keeps of a single launch (`submission`): its own idempotency (the call's key
with `#<index>` appended, `spec_key`: a retry of the whole call finds each job again, and a
call racing an identical one makes each job once, the store's unique (owner, key)
deciding); the launch quota and the write rate, counted per spec, not per call; the
`notify` check; and the wait for the first attempt, all of them against one deadline.

Fairness (`_Window`): a bulk hands at most `concurrency` of its jobs to the resource's
submitter at a time, the next one as soon as one ends. The submitter's pool of a resource
is first in, first out: with the whole bulk queued at once, a launch by anybody else would
wait behind every one of its `sbatch`; with the window, it waits for one worker to free.
The bulk alone still keeps every worker busy, so it goes as fast as the resource allows.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from iri_gateway.errors import GatewayError, SchedulerError
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.models.webhooks import Notify
from iri_gateway.service.accounts.quotas import ACTIVE_STATES, active_jobs_error
from iri_gateway.service.jobs.attempts import Attempts
from iri_gateway.service.jobs.context import JobsContext
from iri_gateway.service.jobs.idempotency import request_hash
from iri_gateway.service.jobs.submission import Submissions
from iri_gateway.service.operations.backends import NO_CLAIMS
from iri_gateway.service.operations.store import JobRecord, NewJob

log = logging.getLogger(__name__)

NotifyCheck = Callable[[str, Notify | None], None]
"""Checks a job's `notify` before it is launched (`webhooks.service.Webhooks.check_notify`)."""

RESTAMP_AFTER = 5.0
"""Seconds a job may wait in its bulk's window before its submission attempt is recorded
again as it is handed over. A job is recorded with its attempt time, and after a crash the
reconcile waits `settle_time` from that time before it takes "the scheduler does not have
it" for "it never got it"; a time much older than the real `sbatch` would shorten that
wait (a long bulk behind slow image staging). Younger than this, one commit per job saved."""


def spec_key(idempotency_key: str, index: int) -> str:
    """The idempotency key of spec `index` of a bulk launch sent with `idempotency_key`."""
    return f"{idempotency_key}#{index}"


@dataclass(frozen=True)
class BulkOutcome:
    """What became of one spec of a bulk launch: its job (`replayed`: made by an earlier
    call with the same key), or the refusal that stopped it (`error`; with `record` when
    the job was recorded and the scheduler refused it)."""

    index: int
    record: JobRecord | None = None
    replayed: bool = False
    error: GatewayError | None = None


@dataclass(frozen=True)
class _Spec:
    """A spec of the call, with what decides whether a later call is a retry of it."""

    index: int
    spec: JobSpec
    document: dict[str, Any]
    digest: str
    key: str | None


class BulkLaunches:
    """Bulk launches: checked and planned per spec, recorded together, sent in a window."""

    def __init__(
        self,
        context: JobsContext,
        attempts: Attempts,
        submissions: Submissions,
        *,
        check_notify: NotifyCheck,
    ) -> None:
        self.context = context
        self.attempts = attempts
        self.submissions = submissions
        self._check_notify = check_notify

    def submit_many(
        self,
        *,
        owner: str,
        resource_id: str,
        specs: Sequence[tuple[int, JobSpec]],
        idempotency_key: str | None = None,
        wait: float | None = None,
        quota: int | None = None,
        admit: Callable[[], None] | None = None,
        claims: Mapping[str, Any] = NO_CLAIMS,
    ) -> list[BulkOutcome]:
        """Launch each of `specs` (index in the call, spec) as its own job; the outcomes in
        the same order.

        A spec whose key (`spec_key`) made a job before is that job, replayed (a read: not
        counted, not checked again; the same key with another spec is an
        IdempotencyConflictError). Each other spec, in index order: `admit` is called (the
        write rate; its refusal refuses the spec), its `notify` is checked, and it is
        planned (JobRejectedError, every problem); of those planned, the first ones that
        fit `quota` (unfinished jobs of `owner` on the resource) are recorded, all in one
        transaction, and the rest refused with QuotaError. The answer waits up to `wait`
        seconds in all (None: until every first attempt ended) for the first attempts, as
        `Submissions.submit` does for one: a job the scheduler refused is its error.
        """
        context = self.context
        loaded = context.registry.get(resource_id)
        given = [_spec(index, spec, resource_id, idempotency_key) for index, spec in specs]
        held = (
            context.store.by_idempotency_keys([owner], [s.key for s in given if s.key])
            if idempotency_key is not None
            else {}
        )
        outcomes: dict[int, BulkOutcome] = {}
        replays: list[tuple[_Spec, JobRecord]] = []
        prepared: list[tuple[_Spec, NewJob]] = []
        for spec in given:
            earlier = held.get((owner, spec.key)) if spec.key is not None else None
            if earlier is not None:
                replays.append((spec, earlier))
                continue
            try:
                if admit is not None:
                    admit()
                self._check_notify(owner, spec.spec.notify)
                job = self.submissions.prepare(
                    owner=owner,
                    loaded=loaded,
                    spec=spec.spec,
                    document=spec.document,
                    idempotency_key=spec.key,
                    digest=spec.digest,
                    claims=claims,
                )
            except GatewayError as error:
                outcomes[spec.index] = BulkOutcome(spec.index, error=error)
                continue
            prepared.append((spec, job))
        prepared = self._within_quota(prepared, outcomes, owner, resource_id, quota)
        created, raced = self._record(prepared)
        replays += raced
        window = _Window(self.context, self.attempts, resource_id, [r.id for _, r in created])
        window.start()
        deadline = None if wait is None else time.monotonic() + wait
        for spec, record in created:
            outcomes[spec.index] = self._first(spec, record, window.first[record.id], deadline)
        for spec, earlier in replays:
            outcomes[spec.index] = self._replayed(spec, earlier, deadline)
        return [outcomes[index] for index, _ in specs]

    def _within_quota(
        self,
        prepared: list[tuple[_Spec, NewJob]],
        outcomes: dict[int, BulkOutcome],
        owner: str,
        resource_id: str,
        quota: int | None,
    ) -> list[tuple[_Spec, NewJob]]:
        """The planned specs that fit the quota, in index order; the others refused (429)."""
        if quota is None or not prepared:
            return prepared
        used = self.context.store.count(owner=owner, resource_id=resource_id, states=ACTIVE_STATES)
        room = max(0, quota - used)
        for spec, _ in prepared[room:]:
            outcomes[spec.index] = BulkOutcome(
                spec.index,
                error=active_jobs_error(
                    owner=owner, resource_id=resource_id, limit=quota, used=max(used, quota)
                ),
            )
        return prepared[:room]

    def _record(
        self, prepared: list[tuple[_Spec, NewJob]]
    ) -> tuple[list[tuple[_Spec, JobRecord]], list[tuple[_Spec, JobRecord]]]:
        """Record the jobs in one transaction, each in flight in this engine from before its
        record can be read (as `submit` does); the new ones, and the specs whose key a
        racing call recorded first, with that call's job."""
        in_flight = self.context.in_flight
        for _, job in prepared:
            in_flight.claim(job["job_id"])
        try:
            recorded = self.context.store.create_many([job for _, job in prepared])
        except BaseException:
            for _, job in prepared:
                in_flight.release(job["job_id"])
            raise
        created: list[tuple[_Spec, JobRecord]] = []
        raced: list[tuple[_Spec, JobRecord]] = []
        for (spec, job), (record, new) in zip(prepared, recorded, strict=True):
            if new:
                self.context.metrics.launched(record.resource_id)
                created.append((spec, record))
            else:
                in_flight.release(job["job_id"])
                raced.append((spec, record))
        return created, raced

    def _first(
        self, spec: _Spec, record: JobRecord, first: Future[JobRecord], deadline: float | None
    ) -> BulkOutcome:
        """A new job as its first attempt left it, or as it is when the deadline comes."""
        try:
            return BulkOutcome(spec.index, self.context.awaited(first, record.id, _left(deadline)))
        except SchedulerError as refused:  # the job failed with the scheduler's words
            return BulkOutcome(spec.index, self.context.current(record.id), error=refused)

    def _replayed(self, spec: _Spec, earlier: JobRecord, deadline: float | None) -> BulkOutcome:
        """The job an earlier call made for this spec's key, as `replay` answers a retry."""
        try:
            again = self.submissions.replay(earlier, spec.key or "", spec.digest, _left(deadline))
        except GatewayError as error:  # the key came with another spec
            return BulkOutcome(spec.index, error=error)
        return BulkOutcome(spec.index, again.record, replayed=True)


def _spec(index: int, spec: JobSpec, resource_id: str, idempotency_key: str | None) -> _Spec:
    document = spec.model_dump(mode="json", exclude_unset=True)
    return _Spec(
        index=index,
        spec=spec,
        document=document,
        digest=request_hash(resource_id, document),
        key=None if idempotency_key is None else spec_key(idempotency_key, index),
    )


def _left(deadline: float | None) -> float | None:
    """Seconds until `deadline` (None: no deadline), never below zero."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class _Window:
    """A bulk's recorded jobs, handed to the submitter at most `concurrency` at a time.

    `first` holds each job's first attempt from the start (a future that ends as the real
    attempt does, or that is still pending while the job waits its turn), so that the
    answer and a racing retry (`inflight.first_attempt`) can wait on it. Jobs still waiting
    when the submitter is closed are left to the reconcile, as a closing submitter leaves
    the work it had not started."""

    def __init__(
        self, context: JobsContext, attempts: Attempts, resource_id: str, job_ids: list[str]
    ) -> None:
        self.context = context
        self.attempts = attempts
        self.resource_id = resource_id
        self.first: dict[str, Future[JobRecord]] = {job_id: Future() for job_id in job_ids}
        self._waiting = deque(job_ids)
        self._lock = threading.Lock()
        self._recorded_at = time.monotonic()
        for job_id, first in self.first.items():
            context.in_flight.track_first_attempt(job_id, first)

    def start(self) -> None:
        """Hand over the first `concurrency` jobs; each one that ends hands over the next."""
        for _ in range(self.context.submitter.concurrency):
            self._next()

    def _next(self) -> None:
        """Hand the next waiting job over (those the closed submitter will not send, or that
        could not be handed over, are passed by: the reconcile sends them)."""
        while True:
            with self._lock:
                if not self._waiting:
                    return
                job_id = self._waiting.popleft()
            if self._hand_over(job_id):
                return

    def _hand_over(self, job_id: str) -> bool:
        """Give the job to the submitter (its attempt recorded again when it waited long):
        True when it was, False when it is left to the reconcile."""
        context = self.context
        if context.submitter.closed:
            context.in_flight.release(job_id)
            self._as_recorded(job_id)
            return False
        first = self.first[job_id]
        first.set_running_or_notify_cancel()
        try:
            if time.monotonic() - self._recorded_at > RESTAMP_AFTER:
                context.store.mark_submit_attempt(job_id)
            attempt = self.attempts.dispatch(job_id, self.resource_id, attempt=0)
        except Exception as fault:  # the database, say
            context.in_flight.release(job_id)
            first.set_exception(fault)
            return False
        attempt.add_done_callback(lambda done: self._ended(job_id, done))
        return True

    def _ended(self, job_id: str, done: Future[JobRecord]) -> None:
        """The job's attempt ended: its first attempt with it; the next job handed over."""
        if done.cancelled():  # the submitter closed before it started
            self._as_recorded(job_id)
        elif (error := done.exception()) is not None:
            self.first[job_id].set_exception(error)
        else:
            self.first[job_id].set_result(done.result())
        self._next()

    def _as_recorded(self, job_id: str) -> None:
        """End the first attempt of a job left to the reconcile with the job as recorded."""
        first = self.first[job_id]
        try:
            first.set_result(self.context.current(job_id))
        except Exception as fault:
            first.set_exception(fault)
