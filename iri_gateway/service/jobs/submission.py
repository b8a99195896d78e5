"""Submitting jobs: validate, plan and record, then send through the submitter; the dry run.

Nothing is lost and nothing is sent twice: the job is recorded (with the intent to submit)
before the scheduler hears of it, every submission carries the gateway's job id as a tag, and
the job is in flight in this engine (`inflight`) from before its record can be read, so the
continuous reconcile (`recovery`) leaves it to the submitter. An attempt whose outcome is
unknown ends the claim, and the reconcile looks the job up by its tag.
"""

from __future__ import annotations

import logging
import posixpath
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from iri_gateway.errors import (
    GatewayError,
    JobRejectedError,
    SchedulerError,
    SchedulerUnavailableError,
)
from iri_gateway.models.job import JobState
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.plan import Plan
from iri_gateway.planning.job_templates import with_template
from iri_gateway.planning.planner import make_plan
from iri_gateway.service.accounts.quotas import ACTIVE_STATES, check_active_jobs
from iri_gateway.service.files import policy
from iri_gateway.service.jobs.context import JobsContext, job_directory
from iri_gateway.service.jobs.errors import IdempotencyConflictError
from iri_gateway.service.jobs.idempotency import Submission, request_hash
from iri_gateway.service.jobs.store import IdempotencyKeyTakenError, JobRecord
from iri_gateway.service.operations.backends import Backend
from iri_gateway.transport.base import NotSentError, TransportError

log = logging.getLogger(__name__)

Roots = Callable[[str, LoadedResource, Backend], tuple[str, ...]]
"""The roots a resource's profile grants a user (`files.JobFiles.roots`)."""
CancelSender = Callable[[JobRecord], JobRecord]
"""Delivers a recorded cancel (`changes.Changes.send_cancel`)."""


class Submissions:
    """Submissions of jobs to every resource, their attempts, and the launch quota."""

    def __init__(self, context: JobsContext, *, roots: Roots, send_cancel: CancelSender) -> None:
        self.context = context
        self._roots = roots
        self._send_cancel = send_cancel

    def submit(
        self,
        *,
        owner: str,
        resource_id: str,
        spec: JobSpec,
        idempotency_key: str | None = None,
        wait: float | None = None,
    ) -> Submission:
        """Validate, plan and record the job, then hand it to the submitter; wait for it.

        The record (state `new`, desired state "submitted") exists before the scheduler is
        asked, and the job is in flight in this engine from before its record can be read,
        so the continuous reconcile leaves it to the submitter. The answer waits `wait`
        seconds (None: until the first attempt ends) for the scheduler: the job as the first
        attempt left it (queued with its native id, or `new` with the reason it waits), the
        scheduler's refusal raised (the job is `failed` with its words), or, when the wait
        runs out first, the job `new` with what is being done.

        A retry with the same idempotency key returns the first job, waiting as long for it;
        the key is unique in the store, so two requests racing with it make one job.
        """
        context = self.context
        loaded = context.registry.get(resource_id)
        document = spec.model_dump(mode="json", exclude_unset=True)
        digest = request_hash(resource_id, document)
        if idempotency_key is not None:
            earlier = context.store.by_idempotency_key(owner, idempotency_key)
            if earlier is not None:
                return self._replay(earlier, idempotency_key, digest, wait)
        backend = context.backends.get(loaded, owner)
        job_id = str(uuid.uuid4())
        expanded = context.templates.expand(owner, spec)
        effective = self._effective_spec(expanded.spec, backend, job_id, owner=owner, loaded=loaded)
        plan = with_template(
            make_plan(effective, loaded, context.registry.known_facts), expanded.template
        )
        context.in_flight.claim(job_id)
        try:
            record = context.store.create(
                job_id=job_id,
                owner=owner,
                resource_id=resource_id,
                spec=document,
                effective_spec=effective.model_dump(mode="json", exclude_unset=True),
                plan=plan.model_dump(mode="json", exclude={"script"}),
                script=plan.script,
                idempotency_key=idempotency_key,
                request_hash=digest,
                submitting=True,
                claimed_by=context.replica.id,
            )
        except IdempotencyKeyTakenError as taken:  # a concurrent submission won the key
            context.in_flight.release(job_id)
            return self._replay(taken.earlier, taken.earlier.idempotency_key or "", digest, wait)
        except BaseException:
            context.in_flight.release(job_id)
            raise
        first = self.dispatch(record.id, record.resource_id, attempt=0)
        return Submission(context.awaited(first, record.id, wait), replayed=False)

    def plan(self, *, owner: str, resource_id: str, spec: JobSpec) -> Plan:
        """The dry run of a submission by `owner`: the same refusals (folders included)."""
        context = self.context
        loaded = context.registry.get(resource_id)
        expanded = context.templates.expand(owner, spec)
        spec = expanded.spec
        if spec.directory is not None or any((spec.stdin_path, spec.stdout_path, spec.stderr_path)):
            backend = context.backends.get(loaded, owner)
            self._effective_spec(spec, backend, "planned-job", owner=owner, loaded=loaded)
        return with_template(
            make_plan(spec, loaded, context.registry.known_facts), expanded.template
        )

    # ---- launch quota ----------------------------------------------------------------------

    def active_jobs(self, *, owner: str, resource_id: str) -> int:
        """How many of `owner`'s jobs on `resource_id` are unfinished (the count the
        `active_jobs_per_user` quota holds to)."""
        return self.context.store.count(owner=owner, resource_id=resource_id, states=ACTIVE_STATES)

    def check_launch_quota(
        self, *, owner: str, resource_id: str, limit: int, idempotency_key: str | None
    ) -> None:
        """QuotaError when `owner` has `limit` unfinished jobs on `resource_id` already; a
        retry of a launch (its idempotency key known) is a read, never refused."""
        store = self.context.store
        if (
            idempotency_key is not None
            and store.by_idempotency_key(owner, idempotency_key) is not None
        ):
            return
        check_active_jobs(store, owner=owner, resource_id=resource_id, limit=limit)

    # ---- retries of the same request -------------------------------------------------------

    def _replay(self, earlier: JobRecord, key: str, digest: str, wait: float | None) -> Submission:
        """The job an idempotency key made, once its first attempt ended or `wait` ran out;
        IdempotencyConflictError when the key came with a different request."""
        if earlier.request_hash != digest:
            raise IdempotencyConflictError(
                f"idempotency key {key!r} was used for a different request (job {earlier.id})"
            )
        first = self.context.in_flight.first_attempt(earlier.id)
        if first is None:
            return Submission(self._awaited_elsewhere(earlier, wait), replayed=True)
        try:
            return Submission(self.context.awaited(first, earlier.id, wait), replayed=True)
        except SchedulerError:  # the refusal was the first request's answer; this is a read
            return Submission(self.context.current(earlier.id), replayed=True)

    def _awaited_elsewhere(self, record: JobRecord, wait: float | None) -> JobRecord:
        """A job another replica is sending, as the store shows it once that replica is done
        (a native id, a final state, or its claim ended) or `wait` seconds have passed
        (None: the settle time). Read every 50 ms: a retry that reached another replica
        than the first request answers like the first one would."""
        context = self.context
        deadline = time.monotonic() + (context.settle_time if wait is None else wait)
        live = None
        while (
            record.native_id is None
            and not record.state.final
            and record.claimed_by not in (None, context.replica.id)
        ):
            if live is None:
                live = context.replica.live()
                if record.claimed_by not in live:
                    break
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
            record = context.current(record.id)
        return record

    # ---- attempts --------------------------------------------------------------------------

    def dispatch(self, job_id: str, resource_id: str, *, attempt: int) -> Future[JobRecord]:
        """Hand a claimed job to the submitter for submission attempt `attempt` (0: the
        first, recorded with the job). The claim ends with the job's last attempt."""
        in_flight = self.context.in_flight
        future = self.context.submitter.run(resource_id, lambda: self._attempt(job_id, attempt))
        if attempt == 0:
            in_flight.track_first_attempt(job_id, future)

        def dropped(done: Future[JobRecord]) -> None:
            if done.cancelled():  # the submitter closed first: the next start reconciles it
                in_flight.release(job_id)

        future.add_done_callback(dropped)
        return future

    def _attempt(self, job_id: str, attempt: int) -> JobRecord:
        """One submission attempt, on a submitter worker; the job as it left it.

        Nothing reached the scheduler (it was unavailable, the login node unreachable): the
        job stays `new`, still claimed, and the submitter tries again after a growing pause.
        The outcome is unknown: the claim ends and the reconcile finds the job by its tag
        (never a second `sbatch` while the first may have worked). Otherwise the job is
        queued, canceled (a cancel came first), or failed with the scheduler's refusal
        (raised).
        """
        context = self.context
        retry_in = context.submitter.pause(attempt)
        retry = False
        settled = False
        try:
            record = context.current(job_id)
            if record.state.final or record.native_id is not None:
                return record
            if record.desired == "canceled":
                return context.store.transition(
                    record.id, JobState.CANCELED, "canceled before it reached the scheduler"
                )
            loaded = context.registry.get(record.resource_id)
            backend = context.backends.get(loaded, record.owner)
            record, retry = self._send(
                record, loaded, backend, fresh=attempt == 0, retry_in=retry_in
            )
            settled = True
            return record
        except SchedulerError:
            settled = True  # refused: the job failed with the scheduler's words
            raise
        finally:
            if not retry:
                context.in_flight.release(job_id)
                if not settled:  # a fault that is not the scheduler's: the reconcile's job
                    context.store.release(job_id, context.replica.id)
            else:
                resource_id = record.resource_id

                def again() -> None:
                    self.dispatch(job_id, resource_id, attempt=attempt + 1)

                if not context.submitter.later(retry_in, again):
                    context.in_flight.release(job_id)

    def _effective_spec(
        self, spec: JobSpec, backend: Backend, job_id: str, *, owner: str, loaded: LoadedResource
    ) -> JobSpec:
        """The spec as it will run: a job folder when none is named, output files in it.

        A named `directory` is made absolute (relative to the account's home) and normal,
        and must lie inside a root the profile grants `owner`, outside the gateway's own
        folders; input and output paths must stay inside the directory or a granted root.
        JobRejectedError (every problem, `offered`: the granted roots) otherwise.
        """
        changes: dict[str, Any] = {}
        if spec.directory is None:
            directory = posixpath.join(backend.work_root, job_id)
        else:
            directory = policy.normal(
                spec.directory
                if spec.directory.startswith("/")
                else posixpath.join(backend.home, spec.directory)
            )
        if directory != spec.directory:
            changes["directory"] = directory
        named = spec.directory is not None
        if named or any((spec.stdin_path, spec.stdout_path, spec.stderr_path)):
            problems = policy.job_path_problems(
                spec,
                directory=directory,
                named=named,
                roots=self._roots(owner, loaded, backend),
                reserved=backend.reserved,
                resource_id=loaded.id,
            )
            if problems:
                raise JobRejectedError(loaded.id, problems)
        if spec.stdout_path is None:
            changes["stdout_path"] = (
                "stdout.txt" if spec.directory is None else (f"iri-{job_id}.out")
            )
        if spec.stderr_path is None:
            changes["stderr_path"] = (
                "stderr.txt" if spec.directory is None else (f"iri-{job_id}.err")
            )
        return spec.model_copy(update=changes) if changes else spec

    def _send(
        self,
        record: JobRecord,
        loaded: LoadedResource,
        backend: Backend,
        *,
        fresh: bool = True,
        retry_in: float | None = None,
    ) -> tuple[JobRecord, bool]:
        """Stage, create the job folder, submit; the outcome is recorded whatever it is.

        Returns the record and whether to try again. A `fresh` submission had its attempt
        recorded with the record itself; another one records its new attempt first. Besides
        success:

        - the scheduler refused the job (SubmitError, a failed staging command): it failed,
          and the error is raised;
        - nothing reached the scheduler (the transport surely did not send the command, or
          the scheduler was unavailable before it took the request): the job stays `new`,
          its message says why and when it is tried again (`retry_in` seconds), and the
          answer is "try again";
        - the outcome is unknown (sent, but the answer was lost; or the scheduler timed out
          mid-request): the job is accepted and stays `new`, never `failed` — the reconcile
          finds it by its tag, or resubmits it once sure the scheduler never saw it.
        """
        store = self.context.store
        if not fresh:
            record = store.mark_submit_attempt(record.id)
        staging = record.plan_model.pre_submit
        directory = job_directory(record)
        try:
            for command in staging:
                store.transition(record.id, JobState.NEW, f"staging the image: {' '.join(command)}")
                result = backend.transport.run(command, timeout=3600, idempotent=True)
                if not result.ok:
                    raise SchedulerError(
                        result.argv,
                        result.exit_code,
                        result.stdout,
                        result.stderr,
                        hint="image staging",
                    )
            backend.transport.make_directory(directory)
        except TransportError as error:
            return self._not_sent(record, error, retry_in), True
        except SchedulerError as error:
            store.transition(record.id, JobState.FAILED, f"not submitted: {error}")
            raise
        try:
            native_id = backend.batch.submit(record.script, tag=record.tag)
        except SchedulerUnavailableError as error:
            if error.reached:
                return self._outcome_unknown(record, error), False
            return self._not_sent(record, error, retry_in), True
        except SchedulerError as error:
            store.transition(record.id, JobState.FAILED, str(error))
            raise
        except NotSentError as error:
            return self._not_sent(record, error, retry_in), True
        except TransportError as error:
            return self._outcome_unknown(record, error), False
        record = store.set_native_id(record.id, native_id, f"submitted as {native_id}")
        if record.desired == "canceled":  # a cancel came while the job was being sent
            try:
                return self._send_cancel(record), False
            except GatewayError as error:
                log.warning(
                    "cancel of %s, just submitted, left for the reconcile: %s", record.id, error
                )
        return record, False

    def _not_sent(
        self, record: JobRecord, error: GatewayError, retry_in: float | None
    ) -> JobRecord:
        """Nothing reached the scheduler: the job stays `new`, accepted, and is tried again
        (by the submitter after `retry_in` seconds, or by the next reconcile)."""
        when = f"in {retry_in:g} s" if retry_in is not None else "at the next reconcile"
        return self.context.store.transition(
            record.id, JobState.NEW, f"waiting for the scheduler, trying again {when}: {error}"
        )

    def _outcome_unknown(self, record: JobRecord, error: GatewayError) -> JobRecord:
        """The scheduler may or may not have the job: it stays `new` for the reconcile."""
        return self.context.store.transition(
            record.id,
            JobState.NEW,
            f"submission outcome unknown, will check by its tag: {error}",
            unclaim=True,
        )
