"""PSI/J jobs run through an iri-gateway: the `iri` executor and its configuration.

    executor = JobExecutor.get_instance("iri", url="http://127.0.0.1:8000",
                                        config=IriExecutorConfig(project="proj1"))
    job = Job(JobSpec("/bin/echo", ["hi"]))
    executor.submit(job)
    job.wait()

A job is converted by `psij_convert.to_iri` and submitted with the PSI/J job id (a uuid4) as
its Idempotency-Key, so a retried submission of the same job finds the first one instead of
running it twice; `submit_many` sends many jobs in bulk launches (`psij_bridge.bulk`). One
daemon thread per executor follows the jobs it tracks, while any are tracked: it listens to
one job event stream of the gateway (the caller's jobs on the resource, however many), reads
the jobs once after subscribing (a change made before is not missed) and again after a
`gap`, and reports each tracked job's changes as they come; an event for a job not yet
tracked (its submission's answer still on its way) is kept, bounded, for the job's
`_follow`. A gateway without the stream (a plain IRI server), or a stream that fails for
good, is polled instead, as before: each cycle one getJobs call (the caller's unfinished
jobs) and a getJob call only for a tracked job missing from that list.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from packaging.version import Version
from psij import (
    InvalidJobException,
    Job,
    JobExecutor,
    JobExecutorConfig,
    JobState,
    JobStatus,
    SubmitException,
)

from iri_gateway.client import (
    GatewayClient,
    GatewayClientError,
    JobInfo,
    StreamUnavailable,
)
from iri_gateway.models.job import JobState as IriState
from iri_gateway.psij_bridge.bulk import launch_in_bulk
from iri_gateway.psij_bridge.convert import to_iri

logger = logging.getLogger(__name__)
EARLY_LIMIT = 1000
"""The most jobs whose events the follower keeps before they are tracked (a bound: the
stream carries all of the caller's jobs on the resource, not only this executor's)."""

STATES = {
    # `new` at the gateway: accepted, on its way to the scheduler (or being checked after a
    # lost answer); for PSI/J the job is accepted, hence QUEUED.
    IriState.NEW: JobState.QUEUED,
    IriState.QUEUED: JobState.QUEUED,
    IriState.HELD: JobState.QUEUED,
    IriState.ACTIVE: JobState.ACTIVE,
    IriState.COMPLETED: JobState.COMPLETED,
    IriState.FAILED: JobState.FAILED,
    IriState.CANCELED: JobState.CANCELED,
}


class IriExecutorConfig(JobExecutorConfig):
    """Where and as whom jobs go: the gateway resource, bearer token, project, poll interval.

    `token` defaults to `$IRI_GATEWAY_TOKEN`. `project` is sent as X-IRI-Facility-Project for
    jobs that name no `attributes.account` (the gateway refuses both at once). PSI/J's
    `launcher_log_file` and `work_directory` are accepted but unused: the gateway writes the
    job's script and files itself.
    """

    def __init__(
        self,
        resource: str = "local",
        token: str | None = None,
        project: str | None = None,
        poll_interval: float = 1.0,
        *,
        launcher_log_file: Path | None = None,
        work_directory: Path | None = None,
    ) -> None:
        super().__init__(launcher_log_file=launcher_log_file, work_directory=work_directory)
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be positive, not {poll_interval}")
        self.resource = resource
        self.token = token
        self.project = project
        self.poll_interval = poll_interval


def _problem(action: str, error: GatewayClientError) -> SubmitException:
    """The gateway's answer, field names and reasons included, as PSI/J's exception."""
    transient = error.status == 0 or error.status == 429 or error.status >= 500
    return SubmitException(f"{action}: {error}", error, transient=transient)


class IriJobExecutor(JobExecutor):
    """Submits, follows, cancels and attaches PSI/J jobs through the gateway's REST API."""

    _NAME_ = "iri"  # get_instance sets both; a directly constructed executor needs them too
    _VERSION_ = Version("0.1.0")

    def __init__(self, url: str | None = None, config: JobExecutorConfig | None = None) -> None:
        if not isinstance(config, IriExecutorConfig):
            plain = config or JobExecutorConfig.DEFAULT
            config = IriExecutorConfig(
                launcher_log_file=plain.launcher_log_file, work_directory=plain.work_directory
            )
        self._client = GatewayClient(url, config.token)
        super().__init__(url=self._client.server, config=config)
        self._settings = config
        self._lock = threading.RLock()  # a status callback may submit: same thread, again
        self._tracked: dict[str, Job] = {}
        self._early: dict[str, JobInfo] = {}
        self._poller: threading.Thread | None = None
        self.streaming: bool | None = None
        """Whether the follower listens to the event stream (None: not asked yet)."""

    # ---- the PSI/J operations -------------------------------------------------------------

    def submit(self, job: Job) -> None:
        """Convert and submit; InvalidJobException when the job has no IRI form,
        SubmitException (with the gateway's problem text) when the gateway refuses it."""
        spec = self._check_job(job)
        try:
            document = to_iri(spec)
        except ValueError as error:
            job.executor = None  # unchanged, as PSI/J promises when submit raises
            raise InvalidJobException(str(error), error) from None
        has_account = bool((document.get("attributes") or {}).get("account"))
        project = None if has_account else self._settings.project
        try:
            info = self._client.submit(
                self._settings.resource, document, idempotency_key=job.id, project=project
            )
        except GatewayClientError as error:
            job.executor = None
            raise _problem(f"the gateway refused job {job.id}", error) from None
        job._native_id = info.id
        self._set_job_status(job, JobStatus(JobState.QUEUED, metadata={"native_id": info.id}))
        self._follow(job, info)

    def submit_many(self, jobs: Sequence[Job]) -> list[Exception | None]:
        """Submit `jobs` in bulk launches (launchJobs; PSI/J has no arrays, `psij_bridge.bulk`):
        each job the gateway accepts gets its native id, QUEUED and its status callbacks, as
        with `submit`. One entry per job, in order: None when it was submitted, else the
        exception `submit` would have raised for it (InvalidJobException, SubmitException
        with the gateway's problem), that job left unsubmitted; the others go on."""
        outcomes: list[Exception | None] = [None] * len(jobs)
        documents: dict[int, dict[str, Any]] = {}
        for position, job in enumerate(jobs):
            try:
                spec = self._check_job(job)
            except (InvalidJobException, TypeError) as error:
                outcomes[position] = error
                continue
            try:
                documents[position] = to_iri(spec)
            except ValueError as error:
                job.executor = None
                outcomes[position] = InvalidJobException(str(error), error)
        answers = launch_in_bulk(
            self._client,
            self._settings.resource,
            self._settings.project,
            documents,
            {position: jobs[position].id for position in documents},
        )
        for position, answer in sorted(answers.items()):
            job = jobs[position]
            if isinstance(answer, GatewayClientError):
                job.executor = None
                outcomes[position] = _problem(f"the gateway refused job {job.id}", answer)
                continue
            job._native_id = answer.id
            self._set_job_status(job, JobStatus(JobState.QUEUED, metadata={"native_id": answer.id}))
            self._follow(job, answer)
        return outcomes

    def cancel(self, job: Job) -> None:
        """Ask the gateway to cancel; the poller reports CANCELED (or the state it ended in)."""
        if job.native_id is None:
            raise SubmitException(f"job {job.id} was not submitted")
        try:
            self._client.cancel(self._settings.resource, job.native_id)
        except GatewayClientError as error:
            raise _problem(f"cancel of {job.native_id}", error) from None

    def list(self) -> list[str]:
        """Native ids of the caller's unfinished jobs on the resource (as squeue would)."""
        try:
            return [info.id for info in self._client.jobs(self._settings.resource)]
        except GatewayClientError as error:
            raise _problem("listing jobs", error) from None

    def attach(self, job: Job, native_id: str) -> None:
        """Follow a gateway job; SubmitException when the gateway does not know it."""
        if job.status.state != JobState.NEW:
            raise InvalidJobException("Job must be in NEW state")
        try:
            info = self._client.status(self._settings.resource, native_id)
        except GatewayClientError as error:
            raise _problem(f"attaching to {native_id}", error) from None
        job._native_id = native_id
        job.executor = self
        self._follow(job, info)

    # ---- tracking -------------------------------------------------------------------------

    def _follow(self, job: Job, info: JobInfo) -> None:
        """Report the state seen; keep polling a job that is not final."""
        self._report(job, info)
        if info.final:
            return
        with self._lock:
            early = self._early.pop(info.id, None)
            if early is not None:
                self._report(job, early)
                if early.final:
                    return
            self._tracked[info.id] = job
            if self._poller is None:
                self._poller = threading.Thread(
                    target=self._poll, daemon=True, name="iri-executor-poller"
                )
                self._poller.start()

    def _report(self, job: Job, info: JobInfo) -> None:
        state = STATES[info.state]
        if state == job.status.state:
            return
        metadata: dict[str, object] = {**info.meta_data, "iri_state": info.state.value}
        self._set_job_status(
            job,
            JobStatus(
                state,
                time=info.time,
                message=info.message,
                exit_code=info.exit_code,
                metadata=metadata,
            ),
        )

    def _poll(self) -> None:
        """The follower thread: runs while jobs are tracked, with its own connection; on the
        event stream, else (or once the stream fails for good) by polling."""
        with GatewayClient(self.url, self._settings.token) as client:
            if self.streaming is not False:
                try:
                    if self._listen(client):
                        return
                except StreamUnavailable as missing:
                    if self.streaming is None:
                        logger.debug("iri executor: %s; polling instead", missing)
                    self.streaming = False
                except Exception:  # a follower that dies would leave job.wait() hanging
                    logger.exception("iri executor: the event stream of %s failed", self.url)
            while True:
                with self._lock:
                    if not self._tracked:
                        self._poller = None
                        return
                    tracked = dict(self._tracked)
                try:
                    self._poll_once(client, tracked)
                except Exception:  # a poller that dies would leave job.wait() hanging forever
                    logger.exception("iri executor: polling %s failed", self.url)
                time.sleep(self._settings.poll_interval)

    def _listen(self, client: GatewayClient) -> bool:
        """Follow the tracked jobs on one event stream; True once nothing is tracked."""
        resource = self._settings.resource
        with client.watch(resource) as stream:
            self.streaming = True
            self._reconcile(client)
            if self._done():
                return True
            for event in stream:
                if event.type == "gap":
                    self._reconcile(client)
                elif event.type == "job" and event.job_id is not None:
                    info = event.job or client.status(resource, event.job_id)
                    self._deliver(info)
                if self._done():
                    return True
        return False

    def _reconcile(self, client: GatewayClient) -> None:
        with self._lock:
            tracked = dict(self._tracked)
        self._poll_once(client, tracked)

    def _done(self) -> bool:
        """Whether nothing is tracked; the follower then ends (a later `_follow` starts one)."""
        with self._lock:
            if self._tracked:
                return False
            self._poller = None
            return True

    def _deliver(self, info: JobInfo) -> None:
        """Report an event's job to its PSI/J job, or keep it for a job not yet tracked."""
        with self._lock:
            job = self._tracked.get(info.id)
            if job is None:
                self._early[info.id] = info
                while len(self._early) > EARLY_LIMIT:
                    self._early.pop(next(iter(self._early)))
                return
            self._report(job, info)
            if info.final:
                self._tracked.pop(info.id, None)

    def _poll_once(self, client: GatewayClient, tracked: dict[str, Job]) -> None:
        resource = self._settings.resource
        try:
            listed = {info.id: info for info in client.jobs(resource)}
        except GatewayClientError as error:
            logger.warning("iri executor: cannot list jobs on %s: %s", resource, error)
            return
        for native_id, job in tracked.items():
            info = listed.get(native_id)
            if info is None:  # not unfinished any more (or beyond the list's first page)
                try:
                    info = client.status(resource, native_id)
                except GatewayClientError as error:
                    if error.status != 404:
                        logger.warning("iri executor: status of %s: %s", native_id, error)
                        continue
                    self._untrack(native_id)
                    self._set_job_status(
                        job,
                        JobStatus(
                            JobState.FAILED,
                            message=f"the gateway no longer knows job {native_id}: {error}",
                        ),
                    )
                    continue
            self._report(job, info)
            if info.final:
                self._untrack(native_id)

    def _untrack(self, native_id: str) -> None:
        with self._lock:
            self._tracked.pop(native_id, None)
