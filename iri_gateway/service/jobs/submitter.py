"""The submitter: scheduler commands run off the request path, a bounded number per resource.

Why: a launch used to stage its image (`podman-hpc pull`, up to an hour) and run `sbatch`
inside the HTTP request, holding a request thread and making a client that gave up and retried
wait behind the first attempt. The engine now records the job and hands the scheduler work to
the submitter; the request waits a short while for the outcome and answers in any case.

Each resource has its own pool of `concurrency` workers, so 16 clients get 16 `sbatch` in
flight on one resource, and a slow resource (a login node far away, an image being pulled)
does not take every worker from the others. `later` runs an action after a pause (the
engine's retries with growing pauses while a scheduler is unavailable) from one timer thread,
so a thousand jobs waiting out an outage hold no worker and no thread each.

What to run, and when a job is done, is the engine's business: the submitter knows lanes
(resource ids) and callables, not jobs.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from typing import Any, TypeVar

from iri_gateway.service.operations.metrics import Metrics
from iri_gateway.tracing import carried

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_CONCURRENCY = 16
"""Scheduler commands in flight per resource unless the settings say otherwise."""


def pause(attempt: int, *, first: float, longest: float) -> float:
    """Seconds before retry number `attempt` (0-based): `first`, doubling, at most `longest`."""
    return float(min(first * 2.0 ** min(attempt, 62), longest))


class Submitter:
    """Per-resource worker pools, and a timer for actions that must wait a while."""

    def __init__(
        self,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        first_pause: float = 1.0,
        longest_pause: float = 60.0,
        metrics: Metrics | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"submit concurrency must be at least 1, not {concurrency}")
        self.concurrency = concurrency
        self.first_pause = first_pause
        self.longest_pause = longest_pause
        self.metrics = metrics or Metrics()
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._lock = threading.Lock()
        self._timer: threading.Thread | None = None
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._wake = threading.Condition(self._lock)
        self._order = itertools.count()
        self._closed = False
        self._pending: set[Future[Any]] = set()
        """The work handed to the pools and not done yet (queued or running): what a draining
        stop waits for."""

    def pause(self, attempt: int) -> float:
        """The pause before retry number `attempt` (0-based), as this submitter is set."""
        return pause(attempt, first=self.first_pause, longest=self.longest_pause)

    def run(self, lane: str, work: Callable[[], T]) -> Future[T]:
        """Run `work` on a worker of `lane` (a resource id), at most `concurrency` at once;
        waits in line when all are busy. Opens again after `close`."""
        with self._lock:
            self._closed = False
            pool = self._pools.get(lane)
            if pool is None:
                pool = ThreadPoolExecutor(
                    max_workers=self.concurrency, thread_name_prefix=f"submit-{lane}"
                )
                self._pools[lane] = pool
            # counted in the queue until it starts, in the trace of the request handing it over
            future = self.metrics.queued(lane, pool.submit, carried(work))
            self._pending.add(future)
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: Future[T]) -> None:
        with self._lock:
            self._pending.discard(future)

    @property
    def closed(self) -> bool:
        """Whether the submitter was closed and nothing was run since: what a feeder of work
        (a bulk launch's window, `bulk`) checks before handing more over, since `run` would
        open it again."""
        with self._lock:
            return self._closed

    def busy(self) -> int:
        """Scheduler commands queued or running now."""
        with self._lock:
            return len(self._pending)

    def later(self, delay: float, action: Callable[[], None]) -> bool:
        """Run `action` (quickly: it should hand work to `run`) after `delay` seconds.

        False, and nothing runs, once the submitter is closed: what was left is the
        reconcile's at the next start (the store still says what was meant)."""
        with self._wake:
            if self._closed:
                return False
            due = (time.monotonic() + delay, next(self._order), carried(action))
            heapq.heappush(self._due, due)
            if self._timer is None:
                self._timer = threading.Thread(target=self._tick, name="submit-timer", daemon=True)
                self._timer.start()
            self._wake.notify()
        return True

    def waiting(self) -> int:
        """Actions waiting for their time (retries during an outage)."""
        with self._lock:
            return len(self._due)

    def _tick(self) -> None:
        while True:
            with self._wake:
                while not self._closed and (not self._due or self._due[0][0] > time.monotonic()):
                    timeout = self._due[0][0] - time.monotonic() if self._due else None
                    self._wake.wait(timeout)
                if self._closed:
                    self._timer = None
                    return
                _, _, action = heapq.heappop(self._due)
            try:
                action()
            except Exception:  # one failed hand-over must not end every later retry
                log.exception("a delayed submitter action failed")

    def close(self, *, deadline: float | None = None) -> int:
        """Stop; the number of commands cut (dropped, or still running when it returned).

        With `deadline` (a `time.monotonic()` time: a draining stop), the commands queued or
        running now are first given until then to finish (the launches waiting on them get
        their answer, the jobs their native id); retries not yet due are dropped at once
        (they wait for a scheduler that is down). Then, and without `deadline` at once,
        work not started is dropped (the store still says what was meant: the next start's
        reconcile, or another replica's, sends it). Commands still running are not waited
        for here; a draining server exits without them (`serving`), and the reconcile
        finds such a job by its tag or, after the settle time, sends it again."""
        with self._wake:
            self._closed = True
            self._due.clear()
            self._wake.notify_all()
            pending = list(self._pending)
        if deadline is not None and pending:
            wait_for(pending, timeout=max(0.0, deadline - time.monotonic()))
        with self._wake:
            pools, self._pools = list(self._pools.values()), {}
            cut = len(self._pending)
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
        if cut:
            log.warning(
                "%d scheduler commands cut by the stop (their jobs are recorded: the "
                "reconcile of the next start or of another replica sends them)",
                cut,
            )
        return cut
