"""The service layer's one door: jobs on every resource, for the API, the CLI and the poller.

A small façade: each method hands over to the part that does that one job — `submission`
(submit, plan, launch quota; it hands jobs to `attempts`, which sends them), `bulk` (many
specs in one call, recorded together), `changes` (cancel, update, restart), `arrays` (pages
and cancels of array elements), `recovery` (the reconcile, after a crash and continuously),
`tracking` (one status cycle; the poller drives it), `reading` (jobs, pages, output),
`resources` (resources, accounts, projects, placement) and `files` (the files a user may
reach). The parts share one `context`: the collaborators and what this engine is sending
now. Callers above (`iri_gateway/api`, tests/test_layers.py) use only these methods; the
settings-driven assembly of the collaborators is `iri_gateway.service.assembly`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from iri_gateway.planning.job_templates import facility_templates
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.service.accounts.console_sessions import ConsoleSessions
from iri_gateway.service.accounts.rate_limits import RateLimiter
from iri_gateway.service.events.hub import EventHub
from iri_gateway.service.events.log import EventLog
from iri_gateway.service.events.signal import PostgresListener
from iri_gateway.service.jobs.arrays import Arrays, ElementPage
from iri_gateway.service.jobs.attempts import Attempts
from iri_gateway.service.jobs.bulk import BulkLaunches, BulkOutcome
from iri_gateway.service.jobs.changes import Changes
from iri_gateway.service.jobs.context import JobsContext
from iri_gateway.service.jobs.errors import (
    IdempotencyConflictError,
    JobNotChangeableError,
    JobNotFoundError,
    NotArrayElementsError,
    OutputUnavailableError,
)
from iri_gateway.service.jobs.files import JobFiles
from iri_gateway.service.jobs.idempotency import Submission, request_hash
from iri_gateway.service.jobs.job_templates import TemplateBook, TemplateStore
from iri_gateway.service.jobs.reading import JobPage, Reading, Stream
from iri_gateway.service.jobs.recovery import Recovery
from iri_gateway.service.jobs.resources import Resources
from iri_gateway.service.jobs.submission import Submissions
from iri_gateway.service.jobs.submitter import Submitter
from iri_gateway.service.jobs.tracking import Tracking
from iri_gateway.service.operations.audit import AuditLog
from iri_gateway.service.operations.backends import Backends
from iri_gateway.service.operations.metrics import Metrics
from iri_gateway.service.operations.replicas import Replica
from iri_gateway.service.operations.store import JobStore
from iri_gateway.service.proxy.service import PortProxy, ProxySettings
from iri_gateway.service.resource_health.monitor import ResourceHealth
from iri_gateway.service.tasks.records import TASKS_PER_USER, TaskStore
from iri_gateway.service.tasks.runner import TaskRunner
from iri_gateway.service.webhooks.destinations import DestinationPolicy
from iri_gateway.service.webhooks.service import Webhooks, WebhookSettings

__all__ = [
    "BulkOutcome",
    "ElementPage",
    "Engine",
    "IdempotencyConflictError",
    "JobNotChangeableError",
    "JobNotFoundError",
    "JobPage",
    "NotArrayElementsError",
    "OutputUnavailableError",
    "Stream",
    "Submission",
    "request_hash",
]


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
        resource_health: ResourceHealth | None = None,
        metrics: Metrics | None = None,
        event_window: int = 4096,
        event_retention: float = 72 * 3600.0,
        webhooks: WebhookSettings | None = None,
        webhook_policy: DestinationPolicy | None = None,
        proxy: ProxySettings | None = None,
    ) -> None:
        self.registry = registry
        self.store = store
        self.backends = backends
        self.clock = clock
        self.metrics = metrics or Metrics()
        """Where the engine's parts and the poller count what they do (`operations.metrics`)."""
        self.replica = replica or Replica(store)
        """This process among the gateway replicas sharing the store (see `replicas`)."""
        self.audit = AuditLog(store)
        """The audit log of the changes made through the gateway (`operations.audit`)."""
        self.console_sessions = ConsoleSessions(store, clock=clock)
        """The console's OpenID sessions and sign-ins under way (`accounts.console_sessions`)."""
        self.events = EventLog(store.engine, store.writing)
        """The log of state changes of jobs, members and tasks (`service/events`)."""
        self.event_hub = EventHub(
            self.events,
            store.event_signal,
            window=event_window,
            retention=event_retention,
            listener=(
                PostgresListener(store.engine.url, store.event_signal)
                if store.engine.dialect.name == "postgresql"
                else None
            ),
        )
        """The newest events, read once for all of this process's streams (started by the
        first stream or the app's start)."""
        self.submitter = submitter or Submitter()
        """Runs the scheduler commands of submissions, cancels and updates off the caller's
        thread, a bounded number at a time per resource (see `submitter`)."""
        self.templates = TemplateBook(
            TemplateStore(store, clock=clock), facility_templates(registry)
        )
        """The job templates: each user's own and the facility's (see `job_templates`)."""
        self.tasks = TaskRunner(
            TaskStore(store, clock=clock, per_user=tasks_per_user),
            self.replica,
            workers=task_workers,
            interval=task_progress_interval,
            per_user=task_running_per_user,
        )
        """The filesystem operations' tasks, and the pool running the long ones (see
        `task_runner`)."""
        self.resource_health = resource_health or ResourceHealth(
            registry, backends, interval=0, timeout=10
        )
        """Each resource's scheduler, login node and file roots, probed in the background
        once started (`resource_health`; interval 0: not probed)."""
        self.webhooks = Webhooks(
            store,
            self.replica,
            policy=webhook_policy or DestinationPolicy(),
            settings=webhooks or WebhookSettings(),
            resources=registry.ids,
            events=self.events,
            wakeups=store.event_signal,
            clock=clock,
        )
        """Subscriptions, notify secrets and the outbox of deliveries (`webhooks`); its thread
        is started by the application (`Webhooks.start`)."""
        self.proxy = PortProxy(store, registry, backends, proxy or ProxySettings(), clock=clock)
        """The port proxy's rules: links, sessions, where a job's ports are (`service/proxy`)."""
        self.context = JobsContext(
            registry=registry,
            store=store,
            backends=backends,
            replica=self.replica,
            submitter=self.submitter,
            templates=self.templates,
            clock=clock,
            settle_time=settle_time,
            metrics=self.metrics,
        )
        self._files = JobFiles(self.context)
        self._changes = Changes(self.context)
        attempts = Attempts(self.context, send_cancel=self._changes.send_cancel)
        self._submissions = Submissions(
            self.context,
            attempts,
            roots=self._files.roots,
            proxy_environment=self.proxy.environment,
        )
        self._bulk = BulkLaunches(
            self.context, attempts, self._submissions, check_notify=self.webhooks.check_notify
        )
        self._recovery = Recovery(self.context, attempts, self._changes)
        self._tracking = Tracking(self.context)
        self._reading = Reading(self.context, self._files)
        self._resources = Resources(self.context)
        self._arrays = Arrays(self.context)
        # The door: each public method is its part's, with that part's signature and
        # docstring (one job each; see the module docstring).
        self.submit = self._submissions.submit
        self.submit_many = self._bulk.submit_many
        self.plan = self._submissions.plan
        self.active_jobs = self._submissions.active_jobs
        self.check_launch_quota = self._submissions.check_launch_quota
        self.cancel = self._changes.cancel
        self.update = self._changes.update
        self.restart = self._changes.restart
        self.elements = self._arrays.elements
        self.cancel_elements = self._arrays.cancel_elements
        self.refresh = self._tracking.refresh
        self.reconcile = self._recovery.reconcile
        self.get = self._reading.get
        self.known = self._reading.known
        self.jobs = self._reading.jobs
        self.job_page = self._reading.job_page
        self.output_path = self._reading.output_path
        self.read_output = self._reading.read_output
        self.files = self._files.files
        self.resource = self._resources.resource
        self.account = self._resources.account
        self.projects = self._resources.projects
        self.resources = self._resources.resources
        self.place = self._resources.place

    @property
    def settle_time(self) -> float:
        """Seconds after a submission attempt before the continuous reconcile may decide that
        the scheduler never saw it (see `recovery`)."""
        return self.context.settle_time

    @settle_time.setter
    def settle_time(self, seconds: float) -> None:
        self.context.settle_time = seconds

    @property
    def resubmit_wait(self) -> float:
        """Seconds the reconcile waits for a resubmission it handed to the submitter before
        going on (the submitter goes on in any case)."""
        return self.context.resubmit_wait

    @resubmit_wait.setter
    def resubmit_wait(self, seconds: float) -> None:
        self.context.resubmit_wait = seconds

    # ---- the engine's own ------------------------------------------------------------------

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

    def close(self, *, deadline: float | None = None) -> None:
        """Stop the submitter and release connections, to login nodes and to the database;
        used again, the engine opens new ones. Submissions not sent yet stay recorded as
        `new`: the next start's reconcile (or another replica's) sends them.

        A draining stop gives `deadline` (a `time.monotonic()` time): the scheduler commands
        and the background tasks under way first get until then to finish; then this
        replica gives up its leases and claims, and says it stopped, so the others take its
        work over at once."""
        self.resource_health.stop()
        self.webhooks.stop()
        self.event_hub.stop()
        self.submitter.close(deadline=deadline)
        self.tasks.close(deadline=deadline)
        self.replica.stop()
        self.backends.close()
        self.store.close()
