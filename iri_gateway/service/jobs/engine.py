"""The service layer: submit, track, cancel, update, read output, and reconcile after a crash.

Nothing is lost and nothing is sent twice: the job is recorded (with the intent to submit)
before the scheduler hears of it, every submission carries the gateway's job id as a tag,
and `reconcile` finishes what was left half-done — at start-up what a crash interrupted, and
from the poller, continuously, what the running process could not finish (a submission whose
outcome is unknown, a cancel the scheduler could not be told): a record without a native id is
looked up by its tag and adopted, and resubmitted only when the scheduler surely never saw it;
a cancel that may not have reached the scheduler is sent again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from iri_gateway.errors import (
    GatewayError,
    JobRejectedError,
    SchedulerError,
    SchedulerUnavailableError,
)
from iri_gateway.models.job import JobState, NativeStatus
from iri_gateway.models.jobspec import JobAttributes, JobSpec
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.placement import Placement
from iri_gateway.models.plan import Plan
from iri_gateway.planning.job_templates import facility_templates, with_template
from iri_gateway.planning.placement import place
from iri_gateway.planning.planner import make_plan
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.schedulers.batch import JobChanges
from iri_gateway.service.accounts.quotas import ACTIVE_STATES, check_active_jobs
from iri_gateway.service.accounts.rate_limits import RateLimiter
from iri_gateway.service.files import policy
from iri_gateway.service.files.reads import FileReader, UserFiles, decode_part
from iri_gateway.service.files.refusals import FileRefusedError
from iri_gateway.service.jobs import cluster_members
from iri_gateway.service.jobs.job_templates import TemplateBook, TemplateStore
from iri_gateway.service.jobs.store import (
    IdempotencyKeyTakenError,
    JobFilters,
    JobRecord,
    JobStore,
    StateChange,
)
from iri_gateway.service.jobs.submitter import Submitter
from iri_gateway.service.operations.backends import Backend, Backends
from iri_gateway.service.operations.replicas import Replica
from iri_gateway.service.tasks.records import TASKS_PER_USER, TaskStore
from iri_gateway.service.tasks.runner import TaskRunner
from iri_gateway.transport.base import NotSentError, TransportError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobPage:
    """A page of one owner's jobs and the number of jobs matching the same filters."""

    records: list[JobRecord]
    total: int


class JobNotFoundError(GatewayError):
    """No job with that id belongs to the caller (another user's job is 'not found' too)."""

    code = "job_not_found"


class IdempotencyConflictError(GatewayError):
    """The idempotency key was used before with a different request."""

    code = "idempotency_conflict"


class JobNotChangeableError(GatewayError):
    """The job is past the point where it can be changed or cancelled."""

    code = "job_not_changeable"


@dataclass(frozen=True)
class Submission:
    """A submitted (or re-found) job and whether the idempotency key was seen before."""

    record: JobRecord
    replayed: bool


Stream = Literal["stdout", "stderr"]


def request_hash(resource_id: str, spec: dict[str, Any]) -> str:
    """A stable digest of a submission request, to tell a retry from a different request."""
    text = json.dumps({"resource": resource_id, "spec": spec}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


class Engine:
    """Jobs on every resource of the registry, recorded in the store."""

    def __init__(
        self,
        *,
        registry: ProfileRegistry,
        store: JobStore,
        backends: Backends,
        clock: Callable[[], float] = time.time,
        settle_time: float = 30.0,
        submitter: Submitter | None = None,
        replica: Replica | None = None,
        task_workers: int = 4,
        task_progress_interval: float = 0.5,
        task_running_per_user: int | None = None,
        tasks_per_user: int = TASKS_PER_USER,
    ) -> None:
        self.registry = registry
        self.store = store
        self.backends = backends
        self.clock = clock
        self.settle_time = settle_time
        """Seconds after a submission attempt before the continuous reconcile may decide that
        the scheduler never saw it (see `reconcile`)."""
        # What this engine is sending now, for its own reconcile to leave alone (other
        # replicas see the claim in the store: `claimed_by`).
        self._pending_lock = threading.Lock()
        self._sending: set[str] = set()
        self._first_attempts: dict[str, Future[JobRecord]] = {}
        self.replica = replica or Replica(store)
        """This process among the gateway replicas sharing the store (see `replicas`)."""
        self.resubmit_wait = 2.0
        """Seconds the reconcile waits for a resubmission it handed to the submitter before
        going on (the submitter goes on in any case)."""
        self.submitter = submitter or Submitter()
        """Runs the scheduler commands of submissions, cancels and updates off the caller's
        thread, a bounded number at a time per resource (see `submitter`)."""
        self.templates = TemplateBook(
            TemplateStore(store, clock=clock), facility_templates(registry)
        )
        """The job templates: each user's own and the facility's (see `templates`)."""
        self.tasks = TaskRunner(
            TaskStore(store, clock=clock, per_user=tasks_per_user),
            self.replica,
            workers=task_workers,
            interval=task_progress_interval,
            per_user=task_running_per_user,
        )
        """The filesystem operations' tasks, and the pool running the long ones (see
        `task_runner`)."""

    # ---- submission ------------------------------------------------------------------------

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
        loaded = self.registry.get(resource_id)
        document = spec.model_dump(mode="json", exclude_unset=True)
        digest = request_hash(resource_id, document)
        if idempotency_key is not None:
            earlier = self.store.by_idempotency_key(owner, idempotency_key)
            if earlier is not None:
                return self._replay(earlier, idempotency_key, digest, wait)
        backend = self.backends.get(loaded, owner)
        job_id = str(uuid.uuid4())
        expanded = self.templates.expand(owner, spec)
        effective = self._effective_spec(expanded.spec, backend, job_id, owner=owner, loaded=loaded)
        plan = with_template(
            make_plan(effective, loaded, self.registry.known_facts), expanded.template
        )
        self._claim(job_id)
        try:
            record = self.store.create(
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
                claimed_by=self.replica.id,
            )
        except IdempotencyKeyTakenError as taken:  # a concurrent submission won the key
            self._release(job_id)
            return self._replay(taken.earlier, taken.earlier.idempotency_key or "", digest, wait)
        except BaseException:
            self._release(job_id)
            raise
        first = self._dispatch(record.id, record.resource_id, attempt=0)
        return Submission(self._awaited(first, record.id, wait), replayed=False)

    def _replay(self, earlier: JobRecord, key: str, digest: str, wait: float | None) -> Submission:
        """The job an idempotency key made, once its first attempt ended or `wait` ran out;
        IdempotencyConflictError when the key came with a different request."""
        if earlier.request_hash != digest:
            raise IdempotencyConflictError(
                f"idempotency key {key!r} was used for a different request (job {earlier.id})"
            )
        with self._pending_lock:
            first = self._first_attempts.get(earlier.id)
        if first is None:
            return Submission(self._awaited_elsewhere(earlier, wait), replayed=True)
        try:
            return Submission(self._awaited(first, earlier.id, wait), replayed=True)
        except SchedulerError:  # the refusal was the first request's answer; this is a read
            return Submission(self._current(earlier.id), replayed=True)

    def _awaited_elsewhere(self, record: JobRecord, wait: float | None) -> JobRecord:
        """A job another replica is sending, as the store shows it once that replica is done
        (a native id, a final state, or its claim ended) or `wait` seconds have passed
        (None: the settle time). Read every 50 ms: a retry that reached another replica
        than the first request answers like the first one would."""
        deadline = time.monotonic() + (self.settle_time if wait is None else wait)
        live = None
        while (
            record.native_id is None
            and not record.state.final
            and record.claimed_by not in (None, self.replica.id)
        ):
            if live is None:
                live = self.replica.live()
                if record.claimed_by not in live:
                    break
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
            record = self._current(record.id)
        return record

    def _claim(self, job_id: str) -> None:
        """Mark the job as this engine's to send: the reconcile leaves it alone."""
        with self._pending_lock:
            self._sending.add(job_id)

    def _release(self, job_id: str) -> None:
        with self._pending_lock:
            self._sending.discard(job_id)

    def _dispatch(self, job_id: str, resource_id: str, *, attempt: int) -> Future[JobRecord]:
        """Hand a claimed job to the submitter for submission attempt `attempt` (0: the
        first, recorded with the job). The claim ends with the job's last attempt."""
        future = self.submitter.run(resource_id, lambda: self._attempt(job_id, attempt))
        if attempt == 0:
            with self._pending_lock:
                self._first_attempts[job_id] = future

            def forget(_: Future[JobRecord]) -> None:
                with self._pending_lock:
                    self._first_attempts.pop(job_id, None)

            future.add_done_callback(forget)

        def dropped(done: Future[JobRecord]) -> None:
            if done.cancelled():  # the submitter closed first: the next start reconciles it
                self._release(job_id)

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
        retry_in = self.submitter.pause(attempt)
        retry = False
        settled = False
        try:
            record = self._current(job_id)
            if record.state.final or record.native_id is not None:
                return record
            if record.desired == "canceled":
                return self.store.transition(
                    record.id, JobState.CANCELED, "canceled before it reached the scheduler"
                )
            loaded = self.registry.get(record.resource_id)
            backend = self.backends.get(loaded, record.owner)
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
                self._release(job_id)
                if not settled:  # a fault that is not the scheduler's: the reconcile's job
                    self.store.release(job_id, self.replica.id)
            else:
                resource_id = record.resource_id

                def again() -> None:
                    self._dispatch(job_id, resource_id, attempt=attempt + 1)

                if not self.submitter.later(retry_in, again):
                    self._release(job_id)

    def _awaited(self, future: Future[JobRecord], job_id: str, wait: float | None) -> JobRecord:
        """The outcome of `future` within `wait` seconds; else the job with what is being
        done in its message. The scheduler's refusal is raised.

        Any other fault of the attempt (the database busy past its time-out, a bug) does
        not undo the job: it is recorded and accepted, the attempt gave up its claim, and
        the reconcile sends it. The answer says so instead of a 500 that would make the
        client send a second job."""
        try:
            return future.result(timeout=wait)
        except FutureTimeout:
            pass
        except SchedulerError:
            raise
        except Exception as fault:
            log.error(
                "the first attempt to send job %s failed; the reconcile sends it",
                job_id,
                exc_info=fault,
            )
            record = self._current(job_id)
            said = " ".join(str(fault).split())[:300]
            return replace(
                record,
                message=f"{record.message}; the first attempt to send it "
                f"failed ({type(fault).__name__}: {said}), the reconcile sends it",
            )
        record = self._current(job_id)
        if record.state == JobState.NEW and len(record.history) == 1:  # nothing said yet
            doing = (
                "being sent to the scheduler"
                if future.running()
                else f"waiting for one of the {self.submitter.concurrency} submission "
                f"slots of {record.resource_id}"
            )
            return replace(record, message=f"{record.message}; {doing}")
        return record

    def _current(self, job_id: str) -> JobRecord:
        record = self.store.get(job_id)
        if record is None:
            raise JobNotFoundError(f"no job {job_id!r}")
        return record

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
        if not fresh:
            record = self.store.mark_submit_attempt(record.id)
        staging = record.plan_model.pre_submit
        directory = _directory(record)
        try:
            for command in staging:
                self.store.transition(
                    record.id, JobState.NEW, f"staging the image: {' '.join(command)}"
                )
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
            self.store.transition(record.id, JobState.FAILED, f"not submitted: {error}")
            raise
        try:
            native_id = backend.batch.submit(record.script, tag=record.tag)
        except SchedulerUnavailableError as error:
            if error.reached:
                return self._outcome_unknown(record, error), False
            return self._not_sent(record, error, retry_in), True
        except SchedulerError as error:
            self.store.transition(record.id, JobState.FAILED, str(error))
            raise
        except NotSentError as error:
            return self._not_sent(record, error, retry_in), True
        except TransportError as error:
            return self._outcome_unknown(record, error), False
        record = self.store.set_native_id(record.id, native_id, f"submitted as {native_id}")
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
        return self.store.transition(
            record.id, JobState.NEW, f"waiting for the scheduler, trying again {when}: {error}"
        )

    def _outcome_unknown(self, record: JobRecord, error: GatewayError) -> JobRecord:
        """The scheduler may or may not have the job: it stays `new` for the reconcile."""
        return self.store.transition(
            record.id,
            JobState.NEW,
            f"submission outcome unknown, will check by its tag: {error}",
            unclaim=True,
        )

    # ---- reading ---------------------------------------------------------------------------

    def get(self, *, owner: str, job_id: str) -> JobRecord:
        """The job `job_id` of `owner`; JobNotFoundError for anyone else's or no job."""
        record = self.store.get(job_id)
        if record is None or record.owner != owner:
            raise JobNotFoundError(f"no job {job_id!r}")
        return record

    def known(self, *, owner: str, job_id: str) -> JobRecord | None:
        """The job `job_id` of `owner` if the store holds it in memory, without I/O (None:
        it must be read with `get`); JobNotFoundError when it is someone else's."""
        record = self.store.cached(job_id)
        if record is not None and record.owner != owner:
            raise JobNotFoundError(f"no job {job_id!r}")
        return record

    def jobs(
        self,
        *,
        owner: str,
        resource_id: str,
        states: Sequence[JobState] | None = None,
        name: str | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> list[JobRecord]:
        """The owner's jobs on a resource, oldest first, filtered before paging."""
        self.registry.get(resource_id)  # an unknown resource is an error, not an empty list
        return self.store.find(
            owner=owner,
            resource_id=resource_id,
            states=states,
            name=name,
            offset=offset,
            limit=limit,
        )

    def job_page(
        self,
        *,
        owner: str,
        states: Sequence[JobState] | None = None,
        text: str | None = None,
        offset: int = 0,
        limit: int,
    ) -> JobPage:
        """One page of the owner's jobs on every resource, newest first, and how many match
        in all: a list of any length is read one page at a time."""
        filters: JobFilters = {"owner": owner, "states": states, "text": text}
        records = self.store.find(newest_first=True, offset=offset, limit=limit, **filters)
        total = self.store.count(**filters)
        return JobPage(records=records, total=total)

    # ---- resources ---------------------------------------------------------------------------

    def resource(self, *, resource_id: str) -> LoadedResource:
        """The resource `resource_id`; UnknownResourceError lists the known ones."""
        return self.registry.get(resource_id)

    def account(self, *, resource_id: str, owner: str) -> str:
        """The account `owner`'s jobs and files use on `resource_id` ('' for the gateway's own
        account); NoAccountError when the profile maps none."""
        return self.backends.account(self.resource(resource_id=resource_id), owner)

    def resources(self) -> list[LoadedResource]:
        """Every resource of the loaded profiles, in the order they were loaded."""
        return list(self.registry)

    def active_jobs(self, *, owner: str, resource_id: str) -> int:
        """How many of `owner`'s jobs on `resource_id` are unfinished (the count the
        `active_jobs_per_user` quota holds to)."""
        return self.store.count(owner=owner, resource_id=resource_id, states=ACTIVE_STATES)

    def check_launch_quota(
        self, *, owner: str, resource_id: str, limit: int, idempotency_key: str | None
    ) -> None:
        """QuotaError when `owner` has `limit` unfinished jobs on `resource_id` already; a
        retry of a launch (its idempotency key known) is a read, never refused."""
        if (
            idempotency_key is not None
            and self.store.by_idempotency_key(owner, idempotency_key) is not None
        ):
            return
        check_active_jobs(self.store, owner=owner, resource_id=resource_id, limit=limit)

    def rate_limiter(
        self, *, read_rate: float, write_rate: float, window: float, sync_interval: float
    ) -> RateLimiter:
        """A per-user request rate limiter sharing its counts with the other replicas
        through this engine's store (`rate_limits`)."""
        return RateLimiter(
            self.store,
            self.replica.id,
            read_rate=read_rate,
            write_rate=write_rate,
            window=window,
            sync_interval=sync_interval,
        )

    def place(self, *, spec: JobSpec, owner: str | None = None) -> list[Placement]:
        """Every resource's answer to "can this job run here, and how?", best first; a job
        naming a template is expanded with `owner`'s templates first."""
        if spec.template is not None:
            spec = self.templates.expand(owner or "", spec).spec
        return place(spec, self.registry)

    def close(self) -> None:
        """Stop the submitter and release connections, to login nodes and to the database;
        used again, the engine opens new ones. Submissions not sent yet stay recorded as
        `new`: the next start's reconcile (or another replica's) sends them."""
        self.submitter.close()
        self.tasks.close()
        self.replica.stop()
        self.backends.close()
        self.store.close()

    # ---- cancel and update -------------------------------------------------------------------

    def cancel(self, *, owner: str, job_id: str, wait: float | None = None) -> JobRecord:
        """Record the intent, then have the submitter tell the scheduler; the poller sees
        the job end. Waits `wait` seconds (None: until the scheduler answered) for it.

        The intent is stored first, so a cancel that cannot be delivered now (the scheduler
        unavailable, the login node unreachable) is not lost: the job's message says so and
        the continuous reconcile sends the cancel again until the scheduler takes it —
        nobody has to ask twice. The scheduler's refusal within the wait is raised.
        """
        record = self.get(owner=owner, job_id=job_id)
        if record.state.final:
            return record
        record = self.store.request_cancel(record.id)
        delivery = self.submitter.run(record.resource_id, lambda: self._deliver_cancel(record.id))
        return self._awaited(delivery, record.id, wait)

    def _deliver_cancel(self, job_id: str) -> JobRecord:
        """A recorded cancel sent on a submitter worker; an outage leaves it recorded (the
        message says it is not delivered yet) for the reconcile to send again."""
        record = self._current(job_id)
        if record.state.final:
            return record
        try:
            return self._send_cancel(record)
        except (SchedulerUnavailableError, TransportError):
            return self._current(job_id)

    def _send_cancel(self, record: JobRecord) -> JobRecord:
        """Deliver a recorded cancel; once the scheduler has answered, the reconcile leaves it.

        A job without a native id is canceled here unless it is being sent right now or its
        submission's outcome is still unsettled (younger than `settle_time`): then the intent
        waits for the submission, or for the reconcile once the scheduler's answer is sure.
        """
        loaded = self.registry.get(record.resource_id)
        backend = self.backends.get(loaded, record.owner)
        if record.native_id is not None:
            return self._cancel_native(record, backend)
        if self._unsettled_submission(record, self.settle_time) or not self.store.claim(
            record.id, self.replica.id, live=self.replica.live()
        ):
            return self.store.transition(
                record.id,
                record.state,
                "cancel requested; it is sent once the submission's outcome is known",
            )
        try:  # held: no replica submits it while it is looked up and canceled
            return self._cancel_native(self._current(record.id), backend)
        finally:
            self.store.release(record.id, self.replica.id)

    def _cancel_native(self, record: JobRecord, backend: Backend) -> JobRecord:
        """Cancel the job the scheduler has (found by its tag when no native id is known),
        or end it canceled when the scheduler never had it."""
        try:
            native_id = record.native_id or backend.batch.find(record.tag)
            if native_id is None:
                return self.store.transition(
                    record.id, JobState.CANCELED, "canceled before it reached the scheduler"
                )
            backend.batch.cancel(native_id)
        except (SchedulerUnavailableError, TransportError) as error:
            self.store.transition(
                record.id,
                record.state,
                f"cancel requested, not delivered yet (sent again later): {error}",
            )
            raise
        except SchedulerError:
            self._cancel_sent(record.id)  # the scheduler answered: sending again changes nothing
            raise
        if record.native_id is None:
            self.store.set_native_id(record.id, native_id, f"found as {native_id}")
        return self.store.transition(
            record.id,
            record.state if record.state != JobState.NEW else JobState.QUEUED,
            "cancel requested",
            cancel_sent=True,
        )

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
        record = self.get(owner=owner, job_id=job_id)
        digest = request_hash(
            f"{record.resource_id}/{job_id}", {"request": request, "changes": asdict(changes)}
        )
        if idempotency_key is not None:
            earlier = self.store.update_key(owner, idempotency_key)
            if earlier is not None:
                return self._update_replayed(earlier, digest, idempotency_key, job_id)
        native_id = record.native_id
        if record.state not in (JobState.QUEUED, JobState.HELD) or native_id is None:
            raise JobNotChangeableError(
                f"job {job_id} is {record.state.value}; only queued jobs can be changed"
            )
        loaded = self.registry.get(record.resource_id)
        self._check_changes(record, loaded, changes)
        backend = self.backends.get(loaded, owner)
        if idempotency_key is not None:
            earlier = self.store.claim_update_key(owner, idempotency_key, job_id, digest)
            if earlier is not None:  # a concurrent retry recorded the key first
                return self._update_replayed(earlier, digest, idempotency_key, job_id)

        def send() -> JobRecord:
            try:
                backend.batch.update(native_id, changes)
            except GatewayError as error:
                self.store.transition(
                    record.id, self._current(record.id).state, f"update not applied: {error}"
                )
                raise
            return self.store.transition(record.id, self._current(record.id).state, "updated")

        sent = self.submitter.run(record.resource_id, send)
        try:
            return Submission(sent.result(timeout=wait), replayed=False)
        except FutureTimeout:
            return Submission(
                replace(self._current(record.id), message="update being sent to the scheduler"),
                replayed=False,
            )

    def _update_replayed(self, earlier: str, digest: str, key: str, job_id: str) -> Submission:
        """The answer to an update whose key was recorded before: the job as it is now, or
        IdempotencyConflictError when the key came with another request."""
        if earlier != digest:
            raise IdempotencyConflictError(
                f"idempotency key {key!r} was used for a different request"
            )
        return Submission(self._current(job_id), replayed=True)

    def restart(self, *, owner: str, job_id: str, wait: float | None = None) -> JobRecord:
        """Run the job again under the same gateway job and native id: Slurm `scontrol
        requeue`, PBS `qrerun`, the local scheduler's own restart; a cluster job's script,
        and so every member, starts over. A running job is stopped first. The job goes back
        to `queued`, and its history keeps the earlier run and the restart.

        The scheduler's refusal (a job it no longer holds, PBS's finished jobs) is raised
        with its words; a job not yet sent to the scheduler cannot be restarted.
        """
        record = self.get(owner=owner, job_id=job_id)
        native_id = record.native_id
        if native_id is None or record.state == JobState.NEW:
            raise JobNotChangeableError(
                f"job {job_id} is {record.state.value} and has not reached the scheduler; "
                "only a job the scheduler has run or runs can be restarted"
            )
        backend = self.backends.get(self.registry.get(record.resource_id), owner)

        def send() -> JobRecord:
            command = backend.batch.requeue(native_id)
            runs = 1 + sum(
                1
                for entry in record.history
                if str(entry.get("message", "")).startswith("restart ")
            )
            return self.store.restarted(record.id, f"restart {runs}: {command}")

        sent = self.submitter.run(record.resource_id, send)
        try:
            return sent.result(timeout=wait)
        except FutureTimeout:
            return replace(self._current(record.id), message="restart being sent to the scheduler")

    @staticmethod
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

    # ---- tracking --------------------------------------------------------------------------

    def refresh(self, resource_id: str, pending: list[JobRecord] | None = None) -> int:
        """One status cycle for a resource: one batched query per account; returns changes.

        `pending` are the resource's unsettled records when the caller has already read them
        (the poller does, for all resources at once).
        """
        loaded = self.registry.get(resource_id)
        if pending is None:
            pending = [r for r in self.store.unsettled() if r.resource_id == resource_id]
        pending = [r for r in pending if r.native_id is not None]
        by_account: dict[str, list[JobRecord]] = {}
        for record in pending:
            by_account.setdefault(self.backends.account(loaded, record.owner), []).append(record)
        changes: list[StateChange] = []
        for records in by_account.values():
            backend = self.backends.get(loaded, records[0].owner)
            ids = {r.native_id for r in records if r.native_id is not None}
            statuses = backend.batch.statuses(ids)
            for record in records:
                status = statuses.get(record.native_id or "")
                if status is None:
                    continue
                change = _change_for(record, status)
                size = record.cluster_size
                if size is not None:
                    change = self._with_members(record, backend, change, size=size)
                if change is not None:
                    # Applied only if nothing changed the job since it was read (a restart
                    # in between must not be overwritten by the earlier run's ending).
                    changes.append(replace(change, read_at=record.updated_at))
        self.store.transition_many(changes)
        return len(changes)

    def _with_members(
        self, record: JobRecord, backend: Backend, change: StateChange | None, *, size: int
    ) -> StateChange | None:
        """A cluster job's change with its members read, when this is the time to read them.

        The files are read (one command) when the job turns active or final, and on every
        cycle while it is active and its members are not stored yet: the script writes
        `members` as the job starts, maybe after the scheduler already says it runs. A
        failed job's message names the member that failed first.
        """
        state = change.state if change is not None else record.state
        turned = (
            change is not None
            and change.state != record.state
            and (state == JobState.ACTIVE or state.final)
        )
        if not turned and not (state == JobState.ACTIVE and not record.members):
            return change
        files = self._read_cluster_files(record, backend)
        if files is None or not files.members:
            if state.final and record.members and change is not None:
                # Unreadable now: the members known so far end as the job did.
                views = [
                    {**m, "state": state.value} if m.get("state") == "active" else m
                    for m in record.members
                ]
                return StateChange(
                    record.id, state, change.message, change.exit_code, members=views
                )
            return change
        if not state.final and len(files.members) < size:
            return change  # the script is still writing `members`
        outcome = cluster_members.outcome(
            files.members, files.exits or [], state, record.cluster_ports
        )
        message = change.message if change is not None else record.message or ""
        if state == JobState.FAILED and outcome.first_failure is not None:
            member, code = outcome.first_failure
            message = cluster_members.failure_message(member, code, message)
        exit_code = change.exit_code if change is not None else None
        return StateChange(record.id, state, message, exit_code, members=outcome.views)

    def _read_cluster_files(
        self, record: JobRecord, backend: Backend
    ) -> cluster_members.ClusterFiles | None:
        """Both files with one command through the job's transport; None when unreadable."""
        directory = record.paths.directory
        if not directory or record.native_id is None:
            log.warning("cluster job %s has no job directory or native id", record.id)
            return None
        folder = cluster_members.folder(directory, record.native_id)
        try:
            result = backend.transport.run(
                cluster_members.read_argv(folder), timeout=30, idempotent=True
            )
        except TransportError as error:
            log.warning("members of cluster job %s not read: %s", record.id, error)
            return None
        return cluster_members.parse_read(result, folder)

    # ---- recovery --------------------------------------------------------------------------

    def reconcile(
        self, records: list[JobRecord] | None = None, *, settle: float = 0.0
    ) -> list[str]:
        """Finish what was left half-done; returns one line per action taken.

        At start-up it finishes what a crash interrupted; the poller runs it every few seconds
        for what the running process could not finish: submissions whose outcome is unknown,
        cancels that could not be delivered. The server passes `settle` = `settle_time` both
        times (a crashed process's last command may still be running); 0 settles at once.
        `records` are the unsettled records when the caller has read them already.

        A submission this engine is sending right now is skipped. One whose last attempt is
        younger than `settle` seconds is adopted if the scheduler shows it, but neither
        resubmitted nor given up: a command whose answer was lost may still be running on the
        login node, and only once it cannot be does "the scheduler does not have it" mean "it
        never saw it". A cancel the scheduler has answered is not sent again. When the
        scheduler or the login node fails (still unavailable), the records of the same
        resource and account are left for the next round, which tries again.
        """
        actions: list[str] = []
        unsettled = records if records is not None else self.store.unsettled()
        unavailable: set[tuple[str, str]] = set()
        live: list[str] | None = None
        for listed in unsettled:
            if not self._needs_reconcile(listed):
                continue
            record = self.store.get(listed.id)  # the latest: the list may be a moment old
            if record is None or record.state.final or not self._needs_reconcile(record):
                continue
            try:
                loaded = self.registry.get(record.resource_id)
                where = (record.resource_id, self.backends.account(loaded, record.owner))
            except GatewayError as error:  # the profile no longer has the resource or user
                actions.append(f"{record.id}: left for later: {error}")
                continue
            if where in unavailable:
                continue
            try:
                backend = self.backends.get(loaded, record.owner)
                if record.native_id is None:
                    if live is None:
                        live = self.replica.live()
                    if not self.store.claim(record.id, self.replica.id, live=live):
                        continue  # another live replica is sending it
                    try:
                        record = self._current(record.id)  # as it is now that it is held
                        action = (
                            None
                            if record.native_id is not None or record.state.final
                            else self._recover_submission(record, loaded, backend, settle)
                        )
                    finally:
                        with self._pending_lock:
                            handed_over = record.id in self._sending  # to the submitter
                        if not handed_over:
                            self.store.release(record.id, self.replica.id)
                    if action is not None:
                        actions.append(action)
                else:
                    self._send_cancel(record)
                    actions.append(f"{record.id}: cancel sent again")
            except (SchedulerUnavailableError, TransportError) as error:
                unavailable.add(where)
                actions.append(f"{record.id}: left for later: {error}")
            except GatewayError as error:
                actions.append(f"{record.id}: left for later: {error}")
        return actions

    def _needs_reconcile(self, record: JobRecord) -> bool:
        """A cancel the scheduler has not answered yet, or a submission this engine is not
        sending now (whether another replica is: `claim` decides)."""
        if record.native_id is not None:
            return record.desired == "canceled" and not record.cancel_sent
        with self._pending_lock:
            return record.id not in self._sending

    def _unsettled_submission(self, record: JobRecord, settle: float) -> bool:
        """Being sent by this engine or another live replica, or attempted less than
        `settle` seconds ago."""
        with self._pending_lock:
            if record.id in self._sending:
                return True
        if record.claimed_by not in (None, self.replica.id) and (
            record.claimed_by in self.replica.live()
        ):
            return True
        attempted = record.submit_attempted_at
        return bool(settle) and attempted is not None and self.clock() - attempted < settle

    def _cancel_sent(self, job_id: str) -> None:
        self.store.mark_cancel_sent(job_id)

    def _recover_submission(
        self, record: JobRecord, loaded: LoadedResource, backend: Backend, settle: float
    ) -> str | None:
        """Adopt the job if the scheduler has it; otherwise, once the attempt is older than
        `settle`, cancel, resubmit or give it up. None when there is nothing to do yet."""
        native_id = backend.batch.find(record.tag)
        if native_id is not None:
            self.store.set_native_id(record.id, native_id, f"adopted {native_id}, found by its tag")
            if record.desired == "canceled":
                backend.batch.cancel(native_id)
                self._cancel_sent(record.id)
            return f"{record.id}: adopted {native_id}"
        if self._unsettled_submission(record, settle):
            return None
        if record.desired == "canceled":
            self.store.transition(record.id, JobState.CANCELED, "canceled before submission")
            return f"{record.id}: canceled before submission"
        window = loaded.resource.scheduler.history_window
        attempted = record.submit_attempted_at
        if attempted is None or self.clock() - attempted < window:
            # The submitter sends it (staging may take an hour: never on the poller's thread),
            # with its retries; the reconcile waits a moment for the common, quick case.
            self._claim(record.id)
            attempt = self._dispatch(record.id, record.resource_id, attempt=1)
            try:
                sent = attempt.result(timeout=self.resubmit_wait)
            except FutureTimeout:
                return f"{record.id}: being resubmitted by the submitter"
            except SchedulerError:
                return f"{record.id}: resubmission refused by the scheduler"
            if sent.native_id is None:
                return f"{record.id}: not resubmitted yet: {sent.message}"
            return f"{record.id}: resubmitted (the scheduler never saw it)"
        self.store.transition(
            record.id,
            JobState.FAILED,
            "lost: the submission may have reached the scheduler, which no longer shows it",
        )
        return f"{record.id}: marked lost"

    # ---- output ----------------------------------------------------------------------------

    def output_path(self, record: JobRecord, stream: Stream) -> str:
        """Where the job's `stream` goes: its path, taken relative to the job's directory."""
        paths = record.paths
        path = (paths.stdout_path if stream == "stdout" else paths.stderr_path) or ""
        return path if path.startswith("/") else posixpath.join(_directory(record), path)

    def read_output(
        self,
        *,
        owner: str,
        job_id: str,
        stream: Stream = "stdout",
        tail: int | None = None,
        head: int | None = None,
        offset: int = 0,
        length: int | None = None,
    ) -> str:
        """Part of a job's output: its last or first bytes, or a byte range.

        Read like every file the user reads (`files`): only where the user may read, links
        never followed out; UTF-8, leniently.
        """
        record = self.get(owner=owner, job_id=job_id)
        path = self.output_path(record, stream)
        files = self.files(owner=owner, resource_id=record.resource_id)
        made = None if record.named_directory else record.paths.directory
        try:
            result = files.request(
                path, "range", job_folder=made, tail=tail, head=head, offset=offset, length=length
            )
        except FileRefusedError as error:
            raise OutputUnavailableError(
                f"{stream} of job {job_id} cannot be read at {path}: {error.of_the_path()}"
            ) from None
        return decode_part(result).text

    # ---- files -----------------------------------------------------------------------------

    def files(self, *, owner: str, resource_id: str) -> UserFiles:
        """The files `owner` may read on the resource: the job folders the gateway made for
        their jobs and the roots their profile grants (see `iri_gateway.service.files`)."""
        loaded = self.registry.get(resource_id)
        backend = self.backends.get(loaded, owner)

        def owns_folder(name: str) -> bool:
            record = self.store.get(name)
            return (
                record is not None
                and record.owner == owner
                and record.resource_id == resource_id
                and not record.named_directory
            )

        scope = policy.Scope(
            roots=self._roots(owner, loaded, backend),
            work_root=backend.work_root,
            reserved=backend.reserved,
            owns_folder=owns_folder,
            special_modes=loaded.resource.files.allow_special_modes,
        )
        return UserFiles(scope, FileReader(backend.agents))

    def _roots(self, owner: str, loaded: LoadedResource, backend: Backend) -> tuple[str, ...]:
        """The roots the resource's profile grants `owner` (placeholders filled in)."""
        return policy.granted_roots(
            loaded.resource.files.roots,
            user=owner,
            account=self.backends.account(loaded, owner) or owner,
            home=lambda: backend.home,
        )

    def plan(self, *, owner: str, resource_id: str, spec: JobSpec) -> Plan:
        """The dry run of a submission by `owner`: the same refusals (folders included)."""
        loaded = self.registry.get(resource_id)
        expanded = self.templates.expand(owner, spec)
        spec = expanded.spec
        if spec.directory is not None or any((spec.stdin_path, spec.stdout_path, spec.stderr_path)):
            backend = self.backends.get(loaded, owner)
            self._effective_spec(spec, backend, "planned-job", owner=owner, loaded=loaded)
        return with_template(make_plan(spec, loaded, self.registry.known_facts), expanded.template)


def _directory(record: JobRecord) -> str:
    """The folder the job runs in; the engine records one for every job it accepts."""
    directory = record.paths.directory
    if directory is None:
        raise ValueError(f"job {record.id} has no directory in its effective spec")
    return directory


def _change_for(record: JobRecord, status: NativeStatus) -> StateChange | None:
    """What a scheduler report changes for a record, if anything.

    An unknown native state keeps the previous IRI state; a job killed after the user asked
    to cancel it is canceled, whatever the scheduler calls it.
    """
    state = status.state or record.state
    if state == JobState.FAILED and record.desired == "canceled":
        state = JobState.CANCELED
    if state == record.state and status.message == record.message:
        return None
    return StateChange(record.id, state, status.message, status.exit_code)


class OutputUnavailableError(GatewayError):
    """The job's output file does not exist (yet) or cannot be read."""

    code = "output_unavailable"
