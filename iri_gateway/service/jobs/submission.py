"""Submitting jobs: validate, plan and record, then send through the submitter; the dry run.

Nothing is lost and nothing is sent twice: the job is recorded (with the intent to submit)
before the scheduler hears of it, every submission carries the gateway's job id as a tag, and
the job is in flight in this engine (`inflight`) from before its record can be read, so the
continuous reconcile (`recovery`) leaves it to the submitter, which sends it (`attempts`).
"""

from __future__ import annotations

import posixpath
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from iri_gateway.errors import (
    JobRejectedError,
    SchedulerError,
)
from iri_gateway.models.job_arrays import INDEX_PATTERN
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.plan import Plan
from iri_gateway.planning.job_templates import with_template
from iri_gateway.planning.planner import make_plan
from iri_gateway.service.accounts.quotas import ACTIVE_STATES, check_active_jobs
from iri_gateway.service.files import policy
from iri_gateway.service.jobs.attempts import Attempts
from iri_gateway.service.jobs.context import JobsContext
from iri_gateway.service.jobs.errors import IdempotencyConflictError
from iri_gateway.service.jobs.idempotency import Submission, request_hash
from iri_gateway.service.operations.backends import NO_CLAIMS, Backend
from iri_gateway.service.operations.store import IdempotencyKeyTakenError, JobRecord, NewJob

Roots = Callable[[str, LoadedResource, Backend], tuple[str, ...]]
"""The roots a resource's profile grants a user (`files.JobFiles.roots`)."""


ProxyEnvironment = Callable[[str, JobSpec], dict[str, str]]
"""What a job with service ports is told of the port proxy, by its id and spec
(`service.proxy.service.PortProxy.environment`)."""


class Submissions:
    """Submissions of jobs to every resource (sent by `attempts`), and the launch quota."""

    def __init__(
        self,
        context: JobsContext,
        attempts: Attempts,
        *,
        roots: Roots,
        proxy_environment: ProxyEnvironment,
    ) -> None:
        self.context = context
        self.attempts = attempts
        self._roots = roots
        self.proxy_environment = proxy_environment

    def submit(
        self,
        *,
        owner: str,
        resource_id: str,
        spec: JobSpec,
        idempotency_key: str | None = None,
        wait: float | None = None,
        claims: Mapping[str, Any] = NO_CLAIMS,
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
        the key is unique in the store, so two requests racing with it make one job. The job
        runs as the account the resource maps `owner` to (their identity saying `claims`),
        recorded with it.
        """
        context = self.context
        loaded = context.registry.get(resource_id)
        document = spec.model_dump(mode="json", exclude_unset=True)
        digest = request_hash(resource_id, document)
        if idempotency_key is not None:
            earlier = context.store.by_idempotency_key(owner, idempotency_key)
            if earlier is not None:
                return self.replay(earlier, idempotency_key, digest, wait)
        job = self.prepare(
            owner=owner,
            loaded=loaded,
            spec=spec,
            document=document,
            idempotency_key=idempotency_key,
            digest=digest,
            claims=claims,
        )
        job_id = job["job_id"]
        context.in_flight.claim(job_id)
        try:
            record = context.store.create(**job)
        except IdempotencyKeyTakenError as taken:  # a concurrent submission won the key
            context.in_flight.release(job_id)
            return self.replay(taken.earlier, taken.earlier.idempotency_key or "", digest, wait)
        except BaseException:
            context.in_flight.release(job_id)
            raise
        context.metrics.launched(resource_id)
        first = self.attempts.dispatch(record.id, record.resource_id, attempt=0)
        return Submission(context.awaited(first, record.id, wait), replayed=False)

    def prepare(
        self,
        *,
        owner: str,
        loaded: LoadedResource,
        spec: JobSpec,
        document: dict[str, Any],
        idempotency_key: str | None,
        digest: str,
        claims: Mapping[str, Any] = NO_CLAIMS,
    ) -> NewJob:
        """The job `spec` (sent as `document`) makes, ready to record: `JobStore.create`'s
        arguments, with a new id, the template applied, the job folder and output paths
        filled in, the plan and its script, the submission marked as tried now by this
        replica, and the account it runs as (mapped from `owner` and `claims`).
        JobRejectedError (every problem) when it cannot run there."""
        context = self.context
        backend = context.backends.get(loaded, owner, claims)
        job_id = str(uuid.uuid4())
        expanded = context.templates.expand(owner, spec)
        effective = self._effective_spec(expanded.spec, backend, job_id, owner=owner, loaded=loaded)
        plan = with_template(
            make_plan(effective, loaded, context.registry.known_facts), expanded.template
        )
        return {
            "job_id": job_id,
            "owner": owner,
            "resource_id": loaded.id,
            "spec": document,
            "effective_spec": effective.model_dump(mode="json", exclude_unset=True),
            "plan": plan.model_dump(mode="json", exclude={"script"}),
            "script": plan.script,
            "idempotency_key": idempotency_key,
            "request_hash": digest,
            "submitting": True,
            "claimed_by": context.replica.id,
            "account": backend.account,
        }

    def plan(
        self,
        *,
        owner: str,
        resource_id: str,
        spec: JobSpec,
        claims: Mapping[str, Any] = NO_CLAIMS,
    ) -> Plan:
        """The dry run of a submission by `owner` (whose identity says `claims`): the same
        refusals (folders included)."""
        context = self.context
        loaded = context.registry.get(resource_id)
        expanded = context.templates.expand(owner, spec)
        spec = expanded.spec
        if spec.directory is not None or any((spec.stdin_path, spec.stdout_path, spec.stderr_path)):
            backend = context.backends.get(loaded, owner, claims)
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

    def replay(self, earlier: JobRecord, key: str, digest: str, wait: float | None) -> Submission:
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
        told = self.proxy_environment(job_id, spec)
        if told:
            changes["environment"] = {**spec.environment, **told}
        # An array's elements each write their own files (`%a`: the element's index).
        each = f"-{INDEX_PATTERN}" if spec.array is not None else ""
        if spec.stdout_path is None:
            changes["stdout_path"] = (
                f"stdout{each}.txt" if spec.directory is None else f"iri-{job_id}{each}.out"
            )
        if spec.stderr_path is None:
            changes["stderr_path"] = (
                f"stderr{each}.txt" if spec.directory is None else f"iri-{job_id}{each}.err"
            )
        return spec.model_copy(update=changes) if changes else spec
