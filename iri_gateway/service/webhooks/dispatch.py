"""From the event log to the outbox: which events become which deliveries.

One replica at a time tails the event log (the lease `webhook-outbox`, see `replicas.hold`)
from the outbox's cursor; each batch of job events becomes its deliveries — one per
matching subscription of the job's owner (the state among its `events`, its resource if it
names one, made before the event) and one for the job's own `notify` — committed together
with the cursor's move (`Outbox.fan_out`). Member and task events are on the stream only.
The body is rendered once per event, when its deliveries are made, so every attempt sends
the same bytes (a receiver can deduplicate by `X-IRI-Delivery-ID` and compare).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from pydantic import ValidationError

from iri_gateway.models.webhooks import Notify
from iri_gateway.service.operations.store import JobStore
from iri_gateway.service.webhooks.outbox import Outbox
from iri_gateway.service.webhooks.subscriptions import SubscriptionStore, Target

log = logging.getLogger(__name__)

BATCH = 500
"""Events read from the log per fan-out transaction."""
NOTIFY = "notify"
"""The target of a job's own `notify` deliveries."""


class Event(Protocol):
    """What the outbox reads of a stored event (`service.events.StoredEvent`)."""

    @property
    def id(self) -> int: ...
    @property
    def at(self) -> float: ...
    @property
    def owner(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def resource_id(self) -> str | None: ...
    @property
    def job_id(self) -> str | None: ...
    @property
    def state(self) -> str: ...


class EventSource(Protocol):
    """The event log as the outbox reads it (`service.events.EventLog`)."""

    def after(
        self, event_id: int, *, owner: str | None = None, limit: int = 500
    ) -> Sequence[Event]: ...


class Wakeups(Protocol):
    """The wake-ups of committed events (`service.events.signal.EventSignal`): counted, in
    this process and (PostgreSQL) announced by other replicas."""

    @property
    def count(self) -> int: ...

    def wait_beyond(self, seen: int, timeout: float) -> int: ...

    def wake(self) -> None: ...


Render = Callable[[Any], dict[str, Any] | None]
"""An event -> the JSON document the stream sends as its `data` (None: nothing to send,
e.g. the job is gone)."""


class Dispatcher:
    """Turns events after the cursor into deliveries, a batch per transaction."""

    def __init__(
        self,
        *,
        events: EventSource,
        render: Render,
        outbox: Outbox,
        subscriptions: SubscriptionStore,
        store: JobStore,
        clock: Callable[[], float],
    ) -> None:
        self._events = events
        self._render = render
        self._outbox = outbox
        self._subscriptions = subscriptions
        self._store = store
        self._clock = clock

    def run_once(self) -> tuple[int, int]:
        """One batch: (events read, deliveries made); (0, 0) when the log has nothing new
        or another dispatcher committed this batch first."""
        cursor = self._outbox.cursor()
        events = list(self._events.after(cursor, limit=BATCH))
        if not events:
            return 0, 0
        rows = self._deliveries([event for event in events if event.kind == "job"])
        if not self._outbox.fan_out(cursor, events[-1].id, rows):
            return 0, 0
        return len(events), len(rows)

    def _deliveries(self, events: Sequence[Event]) -> list[dict[str, object]]:
        if not events:
            return []
        targets = self._subscriptions.targets([event.owner for event in events])
        notifies = self._notifies([event.job_id for event in events if event.job_id])
        now = self._clock()
        rows: list[dict[str, object]] = []
        for event in events:
            matched = [
                target
                for target in targets.get(event.owner, [])
                if event.state in target.events
                and (target.resource_id is None or target.resource_id == event.resource_id)
                and event.at >= target.since
            ]
            notify = notifies.get(event.job_id or "")
            if notify is not None and event.state in notify.events:
                matched.append(Target(NOTIFY, None, notify.url, notify.events, None, 0.0))
            if not matched:
                continue
            document = self._render(event)
            if document is None:
                continue
            body = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
            for target in matched:
                rows.append(
                    {
                        "id": str(uuid.uuid4()),
                        "owner": event.owner,
                        "target": target.target,
                        "subscription_id": target.subscription_id,
                        "job_id": event.job_id,
                        "resource_id": event.resource_id,
                        "event_id": event.id,
                        "event_state": event.state,
                        "url": target.url,
                        "body": body,
                        "status": "pending",
                        "attempts": 0,
                        "created_at": now,
                        "next_attempt_at": now,
                        "claimed_by": None,
                        "claimed_until": None,
                        "last_status": None,
                        "last_error": None,
                        "finished_at": None,
                    }
                )
        return rows

    def _notifies(self, job_ids: Sequence[str]) -> dict[str, Notify]:
        """The `notify` of each job that has one (as launched: the spec the user sent)."""
        found: dict[str, Notify] = {}
        for job_id, record in self._store.records(list(dict.fromkeys(job_ids))).items():
            given = record.spec.get("notify")
            if given is None:
                continue
            try:
                found[job_id] = Notify.model_validate(given)
            except ValidationError as error:  # validated at launch: a changed rule since
                log.warning("job %s: its notify is not valid any more: %s", job_id, error)
        return found
