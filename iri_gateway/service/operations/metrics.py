"""Prometheus metrics: every series the gateway exports, and the hooks the parts call.

Why this shape: the parts that do the work (the API's middleware, the submitter, the
attempts, the poller, the backends) each call one method of a `Metrics` at the spot where
something happens, and know nothing of Prometheus. `Metrics` itself does nothing (what a
part gets when nobody measures: tests that build an engine by hand, the command line);
`PrometheusMetrics` records. Each application has its own (`create_app` makes it, with its
own `CollectorRegistry`), so a process that builds many applications (the tests) never
meets a series registered twice.

Three kinds of value:
- counted where they happen (requests, launches, submissions, scheduler commands, retries,
  poller cycles) and the submitter's queue (up and down as commands wait);
- this process's live objects, read by `sample` (database pool, SSH pools, retries
  waiting, the poller's lag): at each scrape, and every `SAMPLE_SECONDS` by a thread when
  several workers serve, so each worker's file is fresh whichever worker is scraped;
- facts of the shared store, computed by the scraped process at scrape time
  (`metrics_facts`): the same whichever replica answers.

With `serve --workers N` prometheus_client's multiprocess mode is on
(`metrics_processes`): every worker writes its values to files in a directory of the
`serve`, and the scraped worker adds them all up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, TypeVar, get_args

if TYPE_CHECKING:
    from iri_gateway.schedulers.batch import BatchSystem
    from iri_gateway.service.jobs.engine import Engine
    from iri_gateway.service.jobs.poller import Poller
    from iri_gateway.service.operations.metrics_facts import StoreFacts

T = TypeVar("T")

SAMPLE_SECONDS = 5.0
"""How often each worker of a multi-worker `serve` writes its live values (pools, lag)."""

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""Request methods kept as label values; any other a client sends is `other`."""

_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_COMMAND_SECONDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_CYCLE_SECONDS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """The instrumentation points, doing nothing: what a part gets when nobody measures."""

    def request(self, *, operation: str, method: str, status: int, seconds: float) -> None:
        """One HTTP request answered."""

    def launched(self, resource: str) -> None:
        """A job accepted by launchJob on `resource` (recorded, handed to the submitter)."""

    def retried(self, resource: str) -> None:
        """A submission that found the scheduler unavailable, to be tried again later."""

    def measured(self, resource: str, batch: BatchSystem) -> BatchSystem:
        """`batch`, its commands timed and their failures counted by `resource`."""
        return batch

    def queued(
        self, lane: str, submit: Callable[[Callable[[], T]], Future[T]], work: Callable[[], T]
    ) -> Future[T]:
        """`submit(work)`, counted in the submitter's queue of `lane` until it starts."""
        return submit(work)

    def poll_cycle(self, seconds: float) -> None:
        """One status cycle of the poller took `seconds`."""

    def start(self, engine: Engine, poller: Poller | None) -> None:
        """Watch the live objects of `engine` and `poller` (the application started)."""

    def stop(self) -> None:
        """Stop watching (the application stops)."""


class PrometheusMetrics(Metrics):
    """The gateway's series, in a registry of their own; see the module docstring."""

    def __init__(self, *, task_users: int = 10) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        from iri_gateway.service.operations.metrics_processes import multiprocess_directory

        self.directory = multiprocess_directory()
        """The workers' shared directory when several serve (None: this process only)."""
        self.task_users = task_users
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.requests = Counter(
            "iri_gateway_http_requests",
            "HTTP requests answered, by operation id (unmatched: no route), method and status",
            ["operation", "method", "status"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "iri_gateway_http_request_duration_seconds",
            "Time from a request's arrival to its answer's last byte, by operation id",
            ["operation", "method"],
            buckets=_SECONDS,
            registry=r,
        )
        self.launches = Counter(
            "iri_gateway_launches",
            "Jobs accepted by launchJob, by resource",
            ["resource"],
            registry=r,
        )
        self.submissions = Counter(
            "iri_gateway_submissions",
            "Batch scripts handed to the scheduler (sbatch, qsub), by resource and outcome "
            "(ok, failed)",
            ["resource", "outcome"],
            registry=r,
        )
        self.command_seconds = Histogram(
            "iri_gateway_scheduler_command_duration_seconds",
            "Time of one scheduler command (submit, statuses, cancel, find, update, requeue, "
            "ping, nodes), by resource",
            ["resource", "command"],
            buckets=_COMMAND_SECONDS,
            registry=r,
        )
        self.command_failures = Counter(
            "iri_gateway_scheduler_command_failures",
            "Scheduler commands that failed (refused, unreachable, unknown outcome), by "
            "resource, command and error type",
            ["resource", "command", "error"],
            registry=r,
        )
        self.retries = Counter(
            "iri_gateway_submission_retries",
            "Submissions put off because the scheduler could not be reached, by resource",
            ["resource"],
            registry=r,
        )
        self.queue = Gauge(
            "iri_gateway_submitter_queue_depth",
            "Scheduler commands waiting for one of the submitter's slots, by resource",
            ["resource"],
            multiprocess_mode="livesum",
            registry=r,
        )
        self.retries_waiting = Gauge(
            "iri_gateway_submitter_retries_waiting",
            "Submitter actions waiting for their time (retries during an outage)",
            multiprocess_mode="livesum",
            registry=r,
        )
        self.cycle_seconds = Histogram(
            "iri_gateway_poller_cycle_duration_seconds",
            "Time of one status cycle of the poller (status queries and reconcile)",
            buckets=_CYCLE_SECONDS,
            registry=r,
        )
        self.poller_lag = Gauge(
            "iri_gateway_poller_lag_seconds",
            "Seconds since the poller last finished a cycle without a fault (the worst "
            "worker's); it cycles every half second when all is well",
            multiprocess_mode="livemax",
            registry=r,
        )
        self.ssh_connections = Gauge(
            "iri_gateway_ssh_connections",
            "Open SSH connections to login nodes, by resource",
            ["resource"],
            multiprocess_mode="livesum",
            registry=r,
        )
        self.ssh_sessions = Gauge(
            "iri_gateway_ssh_sessions",
            "SSH sessions (commands, file agents) in use on those connections, by resource",
            ["resource"],
            multiprocess_mode="livesum",
            registry=r,
        )
        self.db_pool = Gauge(
            "iri_gateway_database_pool_connections",
            "Database connections of the gateway's pools, by state: size (kept open), "
            "checked_out (in use), overflow (opened beyond size for a burst)",
            ["state"],
            multiprocess_mode="livesum",
            registry=r,
        )
        self.health_ok = Gauge(
            "iri_gateway_resource_check_ok",
            "1 when a resource's health probe (scheduler, login node, a file root) last "
            "answered, 0 when it failed or hung past its time-out (the worst worker's)",
            ["resource", "check", "kind"],
            multiprocess_mode="livemin",
            registry=r,
        )
        self.health_seconds = Gauge(
            "iri_gateway_resource_check_duration_seconds",
            "Time the last health probe of a resource took (its time-out when it hung)",
            ["resource", "check"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.health_condition = Gauge(
            "iri_gateway_resource_condition",
            "1 for a resource's condition from its health probes (up, degraded, down, "
            "unknown), 0 for the others",
            ["resource", "condition"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self._engine: Engine | None = None
        self._poller: Poller | None = None
        self._facts: StoreFacts | None = None
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    # ---- hooks -------------------------------------------------------------------------------

    def request(self, *, operation: str, method: str, status: int, seconds: float) -> None:
        method = method if method in METHODS else "other"
        self.requests.labels(operation, method, str(status)).inc()
        self.request_seconds.labels(operation, method).observe(seconds)

    def launched(self, resource: str) -> None:
        self.launches.labels(resource).inc()

    def retried(self, resource: str) -> None:
        self.retries.labels(resource).inc()

    def measured(self, resource: str, batch: BatchSystem) -> BatchSystem:
        from iri_gateway.service.operations.metrics_batch import MeasuredBatch

        return MeasuredBatch(batch, resource, self)

    def command(self, resource: str, command: str, seconds: float, error: str | None) -> None:
        """One scheduler command ended (`error`: the type of its failure, None: it worked)."""
        self.command_seconds.labels(resource, command).observe(seconds)
        if error is not None:
            self.command_failures.labels(resource, command, error).inc()
        if command == "submit":
            self.submissions.labels(resource, "ok" if error is None else "failed").inc()

    def queued(
        self, lane: str, submit: Callable[[Callable[[], T]], Future[T]], work: Callable[[], T]
    ) -> Future[T]:
        waiting = self.queue.labels(lane)
        waiting.inc()
        left = threading.Event()  # the queue is left once: by starting, or by being dropped

        def leave() -> None:
            if not left.is_set():
                left.set()
                waiting.dec()

        def started() -> T:
            leave()
            return work()

        future = submit(started)
        future.add_done_callback(lambda done: leave() if done.cancelled() else None)
        return future

    def poll_cycle(self, seconds: float) -> None:
        self.cycle_seconds.observe(seconds)

    # ---- live values -------------------------------------------------------------------------

    def start(self, engine: Engine, poller: Poller | None) -> None:
        from iri_gateway.service.operations.metrics_facts import StoreFacts

        self._engine, self._poller = engine, poller
        self._facts = StoreFacts(engine.store, task_users=self.task_users, now=time.time)
        if self.directory is None:
            self.registry.register(self._facts)
        self.sample()
        if self.directory is not None:
            self._stop.clear()
            self._sampler = threading.Thread(
                target=self._sample_until_stopped, name="metrics-sampler", daemon=True
            )
            self._sampler.start()

    def stop(self) -> None:
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(timeout=SAMPLE_SECONDS)
            self._sampler = None
        if self._facts is not None and self.directory is None:
            self.registry.unregister(self._facts)
        self._facts = None
        if self.directory is not None:
            from iri_gateway.service.operations.metrics_processes import process_ended

            process_ended(self.directory)

    def _sample_until_stopped(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.sample()

    def sample(self) -> None:
        """Write this process's live values: its pools, its retries waiting, its poller."""
        engine = self._engine
        if engine is None:
            return
        pool = engine.store.engine.pool
        for state, read in (
            ("size", "size"),
            ("checked_out", "checkedout"),
            ("overflow", "overflow"),
        ):
            reader = getattr(pool, read, None)  # a QueuePool has all three; SQLite's may not
            if reader is not None:
                self.db_pool.labels(state).set(max(0, reader()))
        for resource, (connections, sessions) in engine.backends.ssh_usage().items():
            self.ssh_connections.labels(resource).set(connections)
            self.ssh_sessions.labels(resource).set(sessions)
        self.retries_waiting.set(engine.submitter.waiting())
        self._sample_health(engine)
        poller = self._poller
        if poller is not None:
            last = poller.last_cycle
            self.poller_lag.set(0.0 if last is None else max(0.0, poller.clock() - last))

    def _sample_health(self, engine: Engine) -> None:
        """The resources' health probes (`service.resource_health`) as this process saw them
        last; nothing while it does not probe."""
        from iri_gateway.service.resource_health.monitor import Condition

        health = engine.resource_health
        for resource, checks in health.snapshot().items():
            for name, result in checks.items():
                self.health_ok.labels(resource, name, result.kind).set(1 if result.ok else 0)
                self.health_seconds.labels(resource, name).set(result.seconds)
            condition = health.condition(resource)
            if condition is not None:
                for each in get_args(Condition):
                    self.health_condition.labels(resource, each).set(int(each == condition))

    def exposition(self) -> bytes:
        """Every series in the Prometheus text format: this process's (or, with several
        workers, all of theirs, added up) and the store's facts."""
        from prometheus_client import CollectorRegistry, generate_latest

        self.sample()
        if self.directory is None:
            return bytes(generate_latest(self.registry))
        from prometheus_client.multiprocess import MultiProcessCollector

        from iri_gateway.service.operations.metrics_processes import forget_ended

        forget_ended(self.directory)
        scraped = CollectorRegistry(auto_describe=False)
        MultiProcessCollector(scraped, path=str(self.directory))  # type: ignore[no-untyped-call]
        if self._facts is not None:
            scraped.register(self._facts)
        return bytes(generate_latest(scraped))
