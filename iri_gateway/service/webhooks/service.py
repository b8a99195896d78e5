"""Webhooks, the service's one door: subscriptions, notify secrets, deliveries, the threads.

Every replica runs one `webhooks` thread: it dispatches (events -> deliveries) while it holds
the lease `webhook-outbox`, claims due deliveries and hands them to a bounded pool of
senders (`workers`; one user's deliveries take at most half of it), and sweeps finished
deliveries past their retention. Made in this process, new deliveries and finished
attempts wake it at once; otherwise it looks every `poll_interval` seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from iri_gateway.errors import GatewayError, Problem, UnknownResourceError
from iri_gateway.models.webhooks import Notify, SubscriptionRequest
from iri_gateway.service.operations.replicas import Replica
from iri_gateway.service.operations.store import JobStore
from iri_gateway.service.webhooks.destinations import DestinationPolicy
from iri_gateway.service.webhooks.dispatch import Dispatcher, EventSource, Render, Wakeups
from iri_gateway.service.webhooks.outbox import Delivery, Outbox
from iri_gateway.service.webhooks.sender import Retries, Sender
from iri_gateway.service.webhooks.subscriptions import Subscription, SubscriptionStore

log = logging.getLogger(__name__)

LEASE = "webhook-outbox"
"""The lease of the one replica that turns events into deliveries."""
SWEEP_EVERY = 3600.0
"""Seconds between two sweeps of finished deliveries."""
WAKE_LOOK = 5.0
"""Seconds the waking thread waits for an event at a time (then asks the log again)."""


class NotifySecretMissingError(GatewayError):
    """A job names `notify` but its user has no notify secret to sign with (400)."""

    code = "notify_secret_missing"

    def __init__(self) -> None:
        self.problems = [
            Problem(
                "notify",
                "you have no notify secret yet: deliveries would be signed with a key you "
                "never saw",
                "make one with POST /api/v2/compute/notify-secret (shown once), then launch",
            )
        ]
        super().__init__(
            "notify: you have no notify secret yet; make one with "
            "POST /api/v2/compute/notify-secret (it is shown once), then launch again"
        )


@dataclass(frozen=True)
class WebhookSettings:
    """The `webhook_*` settings the service uses."""

    per_user: int = 20
    timeout: float = 10.0
    retry_first: float = 5.0
    retry_longest: float = 3600.0
    max_age: float = 86_400.0
    workers: int = 4
    claim_time: float = 60.0
    retention: float = 7 * 86_400.0
    poll_interval: float = 1.0


class Webhooks:
    """Subscriptions, notify secrets and the outbox of one gateway process."""

    def __init__(
        self,
        store: JobStore,
        replica: Replica,
        *,
        policy: DestinationPolicy,
        settings: WebhookSettings,
        resources: Callable[[], Sequence[str]],
        events: EventSource,
        wakeups: Wakeups | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._events = events
        self._wakeups = wakeups
        self.policy = policy
        self.subscriptions = SubscriptionStore(store, per_user=settings.per_user, clock=clock)
        self.outbox = Outbox(store, clock=clock)
        self._store = store
        self._replica = replica
        self._resources = resources
        self._clock = clock
        self._sender = Sender(
            outbox=self.outbox,
            subscriptions=self.subscriptions,
            policy=policy,
            retries=Retries(settings.retry_first, settings.retry_longest, settings.max_age),
            timeout=settings.timeout,
            replica_id=replica.id,
            clock=clock,
        )
        self._dispatcher: Dispatcher | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._waker: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._busy: dict[str, int] = {}
        self._swept = 0.0

    # ---- what users ask --------------------------------------------------------------------

    def subscribe(self, owner: str, request: SubscriptionRequest) -> tuple[Subscription, str]:
        """Record a standing subscription after checking its resource and its URL; it and its
        secret (shown once)."""
        if request.resource_id is not None and request.resource_id not in self._resources():
            raise UnknownResourceError(request.resource_id, list(self._resources()))
        self.policy.check(request.url, "url")
        return self.subscriptions.create(owner, request)

    def listed(self, owner: str) -> list[Subscription]:
        return self.subscriptions.listed(owner)

    def subscription(self, owner: str, subscription_id: str) -> Subscription:
        return self.subscriptions.get(owner, subscription_id)

    def unsubscribe(self, owner: str, subscription_id: str) -> None:
        self.subscriptions.delete(owner, subscription_id)

    def subscription_deliveries(self, owner: str, subscription_id: str) -> list[Delivery]:
        """The newest deliveries of `owner`'s subscription (404 for anyone else's)."""
        self.subscriptions.get(owner, subscription_id)
        return self.outbox.of_subscription(subscription_id)

    def job_deliveries(self, owner: str, job_id: str) -> list[Delivery]:
        """The newest deliveries about `owner`'s job (the caller checked it is theirs)."""
        return self.outbox.of_job(owner, job_id)

    def new_notify_secret(self, owner: str) -> tuple[str, float]:
        return self.subscriptions.new_notify_secret(owner)

    def notify_secret_made(self, owner: str) -> float | None:
        return self.subscriptions.notify_secret_made(owner)

    def check_notify(self, owner: str, notify: Notify | None) -> None:
        """A job's `notify`, before it is launched: its URL allowed, a secret to sign with."""
        if notify is None:
            return
        self.policy.check(notify.url, "notify.url")
        if self.subscriptions.notify_secret_made(owner) is None:
            raise NotifySecretMissingError()

    # ---- the thread ----------------------------------------------------------------------

    def start(self, *, render: Render) -> None:
        """Dispatch (under the lease) and send from a thread of this process until `stop`,
        each event's body made by `render` (the stream's `data`); with the log's wake-ups, a
        second thread wakes it as soon as a new event is committed (in this process, or
        announced by another replica), instead of at its next look."""
        if self._thread is not None:
            return
        events, wakeups = self._events, self._wakeups
        self._dispatcher = Dispatcher(
            events=events,
            render=render,
            outbox=self.outbox,
            subscriptions=self.subscriptions,
            store=self._store,
            clock=self._clock,
        )
        self._stop.clear()
        self._pool = ThreadPoolExecutor(
            max_workers=self.settings.workers, thread_name_prefix="webhook-send"
        )
        self._thread = threading.Thread(target=self._run, name="webhooks", daemon=True)
        self._thread.start()
        if wakeups is not None:
            self._waker = threading.Thread(
                target=self._watch, args=(wakeups,), name="webhooks-wake", daemon=True
            )
            self._waker.start()

    def wake(self) -> None:
        """Look for new events and due deliveries now (e.g. after an event was committed)."""
        self._wake.set()

    def stop(self) -> None:
        """Stop dispatching and claiming; attempts under way finish (each bounded by the
        timeout); deliveries claimed and not sent are taken over once their claim runs out."""
        self._stop.set()
        self._wake.set()
        if self._wakeups is not None:  # the waking thread returns now, not after WAKE_LOOK
            self._wakeups.wake()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._waker is not None:
            self._waker.join(timeout=WAKE_LOOK + 1)
            self._waker = None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self.policy.close()

    def _watch(self, wakeups: Wakeups) -> None:
        """Wake the webhooks thread at every wake-up of the event log."""
        seen = wakeups.count
        while not self._stop.is_set():
            now = wakeups.wait_beyond(seen, WAKE_LOOK)
            if now != seen:
                seen = now
                self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._cycle()
            except Exception:  # a database fault: logged, tried again next cycle
                log.exception("webhooks cycle failed; trying again")
            self._wake.wait(self.settings.poll_interval)
            self._wake.clear()

    def _cycle(self) -> None:
        dispatcher = self._dispatcher
        if dispatcher is not None and LEASE in self._replica.hold([LEASE]):
            while not self._stop.is_set():
                read, _made = dispatcher.run_once()
                if read == 0:
                    break
        self._claim()
        now = self._clock()
        if now - self._swept > SWEEP_EVERY:
            self._swept = now
            swept = self.outbox.sweep(now - self.settings.retention)
            if swept:
                log.info("webhooks: %d finished deliveries past retention deleted", swept)

    def _claim(self) -> None:
        pool = self._pool
        if pool is None:
            return
        with self._lock:
            free = self.settings.workers - sum(self._busy.values())
            busy = dict(self._busy)
        claimed = self.outbox.claim(
            self._replica.id,
            limit=free,
            hold=self.settings.claim_time,
            per_owner=max(1, self.settings.workers // 2),
            busy=busy,
        )
        for delivery in claimed:
            with self._lock:
                self._busy[delivery.owner] = self._busy.get(delivery.owner, 0) + 1
            pool.submit(self._send, delivery)

    def _send(self, delivery: Delivery) -> None:
        try:
            self._sender.send(delivery)
        except Exception:
            log.exception("webhook delivery %s: the attempt failed", delivery.id)
        finally:
            with self._lock:
                left = self._busy.get(delivery.owner, 1) - 1
                if left:
                    self._busy[delivery.owner] = left
                else:
                    self._busy.pop(delivery.owner, None)
            self._wake.set()
