"""Status tracking: per resource, one batched status query per cycle, at an adaptive pace,
by one replica at a time (the holder of the resource's lease).

A resource with a job submitted moments ago is polled often (jobs start or fail fast right
after submission); one whose jobs have all waited long is polled slowly. Whatever the number
of jobs, a cycle makes one status query per resource and account (see `Engine.refresh`).

Every few seconds a cycle also runs the engine's reconcile, so what the running gateway could
not finish is finished without a restart: a submission whose outcome was lost is found by its
tag (or resubmitted once the scheduler surely never saw it), and a cancel the scheduler could
not be told during an outage is sent again when it is back. It costs nothing when there is
nothing to finish: records that need no action issue no command.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from iri_gateway.errors import GatewayError
from iri_gateway.models.job import JobState
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.operations import events
from iri_gateway.service.operations.events import event
from iri_gateway.service.operations.store import JobRecord, PollEntry

log = logging.getLogger(__name__)

CYCLE_ERROR = "(cycle)"
"""The key of `Poller.errors` under which a failed cycle as a whole is recorded."""


def interval_for(
    records: Sequence[JobRecord | PollEntry], now: float, fast: float, slow: float
) -> float:
    """Seconds until the next poll: `fast` for fresh or running jobs, growing to `slow`.

    The interval doubles for every minute the youngest job has waited in the queue.
    """
    if not records:
        return slow
    if any(r.state == JobState.ACTIVE for r in records):
        return min(slow, fast * 2)
    youngest = min(now - r.created_at for r in records)
    return min(slow, fast * 2 ** (youngest / 60))


class Poller:
    """Drives `Engine.refresh` and `Engine.reconcile` for the resources this replica polls.

    Each resource is polled by one replica at a time: the one holding its lease `poll:<id>`
    (see `replicas`); leases are taken, checked or handed over every `reconcile_every`
    seconds, so a replica that died is replaced within its heartbeat timeout plus that. The
    leases are shared (`Replica.share`): with k live replicas each polls about 1/k of the
    resources, and a lease handed over to a replica that came is without a poller for at
    most one check.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        fast: float = 1.0,
        slow: float = 30.0,
        reconcile_every: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.engine = engine
        self.fast, self.slow = fast, slow
        self.reconcile_every = reconcile_every
        self.clock = clock
        self._next: dict[str, float] = {}
        self._next_reconcile = 0.0
        self._next_leases = 0.0
        self.polling: set[str] = set()
        """The resources whose lease this replica held at the last check."""
        self.last_cycle: float | None = None
        """When the last cycle ended without a fault (None: none yet)."""
        self.errors: dict[str, str] = {}

    def _resources(self, now: float, force: bool) -> set[str]:
        """The resources this replica polls, the leases checked when it is time."""
        if force or now >= self._next_leases:
            self._next_leases = now + self.reconcile_every
            ids = [loaded.id for loaded in self.engine.resources()]
            held = self.engine.replica.share(f"poll:{i}" for i in ids)
            self.polling = {i for i in ids if f"poll:{i}" in held}
        return self.polling

    def cycle(self, *, force: bool = False) -> dict[str, int]:
        """Refresh every resource this replica polls that is due (all of them with
        `force`); changes per resource. The reconcile of those resources runs first when
        it is due (always with `force`). A resource without unsettled jobs is looked at
        again after `fast` seconds, so a new job is polled soon after it is sent.
        """
        now = self.clock()
        polled = self._resources(now, force)
        reconcile = force or now >= self._next_reconcile
        due = sorted(r for r in polled if force or self._next.get(r, 0.0) <= now)
        if not due and not reconcile:
            return {}
        unsettled = self.engine.store.poll_entries(sorted(polled) if reconcile else due)
        if reconcile:
            self._next_reconcile = now + self.reconcile_every
            self.engine.reconcile(unsettled, settle=self.engine.settle_time)  # logs each
        by_resource: dict[str, list[PollEntry]] = {resource_id: [] for resource_id in due}
        for record in unsettled:
            if record.native_id is not None and record.resource_id in by_resource:
                by_resource[record.resource_id].append(record)
        changes: dict[str, int] = {}
        for resource_id, records in by_resource.items():
            if not records:
                self._next[resource_id] = now + self.fast
                continue
            try:
                changes[resource_id] = self.engine.refresh(resource_id, records)
                self.errors.pop(resource_id, None)
            except GatewayError as error:
                self.errors[resource_id] = str(error)
                event(
                    log,
                    events.POLL_FAILED,
                    f"status of {resource_id} failed: {error}",
                    level=logging.WARNING,
                    resource=resource_id,
                    error=str(error),
                )
            self._next[resource_id] = now + interval_for(records, now, self.fast, self.slow)
        return changes

    def run(self, stop: threading.Event, tick: float = 0.5) -> None:
        """Cycle until `stop` is set; errors are recorded per resource, never fatal.

        A fault that is no gateway error (the database gone for a moment, a stored record the
        code cannot read) is logged with its traceback and recorded under `CYCLE_ERROR`, and
        the next cycle runs as usual: one bad cycle must not end status tracking for every
        job until the server restarts.
        """
        while not stop.is_set():
            began = time.monotonic()
            try:
                self.cycle()
                self.engine.metrics.poll_cycle(time.monotonic() - began)
                self.errors.pop(CYCLE_ERROR, None)
                self.last_cycle = self.clock()
            except Exception as error:
                self.errors[CYCLE_ERROR] = f"{type(error).__name__}: {error}"
                log.exception("status cycle failed; the next one runs in %.1f s", tick)
            stop.wait(tick)
