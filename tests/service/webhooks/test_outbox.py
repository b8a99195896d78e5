"""The outbox on a real store (SQLite and PostgreSQL): events become their deliveries exactly
once, also with two dispatchers racing; a receiver that is down at first gets every delivery
once it is up (retries with back-off), signed; a replica that claimed deliveries and died
leaves them to another once the claim runs out.

The events come from a list standing in for the event log (`dispatch.EventSource`, the
contract's `EventLog.after`): the log itself is tested with it, and the whole path, from a
real job's state change to a real receiver through `serve`, in tests/api/test_webhooks_serve.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.models.webhooks import SubscriptionRequest
from iri_gateway.service.operations.replicas import Replica
from iri_gateway.service.operations.store import JobStore
from iri_gateway.service.webhooks.destinations import DestinationPolicy
from iri_gateway.service.webhooks.dispatch import Dispatcher
from iri_gateway.service.webhooks.service import Webhooks, WebhookSettings
from tests.conftest import stored_plan
from tests.support.webhook_receiver import Receiver, until


@dataclass(frozen=True)
class FakeEvent:
    id: int
    at: float
    owner: str
    kind: str
    resource_id: str | None
    job_id: str | None
    state: str


class ListedEvents:
    """Events in a list, read as `EventLog.after` reads the log."""

    def __init__(self) -> None:
        self.events: list[FakeEvent] = []
        self._lock = threading.Lock()

    def add(self, owner: str, job_id: str, state: str, kind: str = "job") -> FakeEvent:
        with self._lock:
            event = FakeEvent(
                len(self.events) + 1, time.time(), owner, kind, "local", job_id, state
            )
            self.events.append(event)
            return event

    def after(
        self, event_id: int, *, owner: str | None = None, limit: int = 500
    ) -> list[FakeEvent]:
        with self._lock:
            return [e for e in self.events if e.id > event_id][:limit]


def render(event: Any) -> dict[str, Any]:
    return {"id": event.id, "type": event.kind, "job_id": event.job_id, "state": event.state}


@pytest.fixture
def store(database_url: str, tmp_path: Path) -> Iterator[JobStore]:
    opened = JobStore(database_url)
    yield opened
    opened.close()


def job(store: JobStore, owner: str, notify: dict[str, Any] | None = None) -> str:
    spec: dict[str, Any] = {"executable": "/bin/true"}
    if notify is not None:
        spec["notify"] = notify
    return store.create(
        owner=owner,
        resource_id="local",
        spec=spec,
        effective_spec=spec,
        plan=stored_plan(),
        script="true",
    ).id


def webhooks(
    store: JobStore, replica: Replica, events: ListedEvents | None = None, **changes: float
) -> Webhooks:
    settings = WebhookSettings(
        **{
            "retry_first": 0.2,
            "retry_longest": 0.5,
            "poll_interval": 0.05,
            "claim_time": 2.0,
            "timeout": 2.0,
            **changes,
        }  # type: ignore[arg-type]
    )
    policy = DestinationPolicy(allowed_networks=["127.0.0.0/8"], http_hosts=["127.0.0.1"])
    return Webhooks(
        store,
        replica,
        policy=policy,
        settings=settings,
        resources=lambda: ["local"],
        events=events or ListedEvents(),
    )


def all_delivered(hooks: Webhooks, subscription_id: str) -> Callable[[], bool]:
    """Whether every delivery of the subscription is delivered, asked anew each call."""
    return lambda: all(
        d.status == "delivered" for d in hooks.outbox.of_subscription(subscription_id)
    )


def test_events_become_their_deliveries_once_with_two_dispatchers_racing(store: JobStore) -> None:
    replica = Replica(store)
    hooks = webhooks(store, replica)
    events = ListedEvents()
    subscription, _ = hooks.subscriptions.create(
        "alice", SubscriptionRequest(url="http://127.0.0.1:9/a", events=["queued", "completed"])
    )
    hooks.subscriptions.new_notify_secret("alice")
    with_notify = job(store, "alice", {"url": "http://127.0.0.1:9/n", "events": ["completed"]})
    plain = job(store, "alice")
    bobs = job(store, "bob", {"url": "http://127.0.0.1:9/b"})
    for _ in range(40):
        events.add("alice", with_notify, "queued")
        events.add("alice", with_notify, "completed")
        events.add("alice", plain, "active")  # no one asked for active
        events.add("alice", plain, "completed", kind="member")  # stream only
        events.add("bob", bobs, "completed")  # bob's notify: his; alice's subscription: not
    dispatchers = [
        Dispatcher(
            events=events,
            render=render,
            outbox=hooks.outbox,
            subscriptions=hooks.subscriptions,
            store=store,
            clock=time.time,
        )
        for _ in range(2)
    ]

    def drain(dispatcher: Dispatcher) -> None:
        for _ in range(200):
            dispatcher.run_once()

    threads = [threading.Thread(target=drain, args=(d,)) for d in dispatchers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert hooks.outbox.cursor() == 200
    deliveries = hooks.outbox.of_job("alice", with_notify, limit=1000)
    by_target = sorted((d.subscription_id or "notify", d.event_state) for d in deliveries)
    assert by_target == sorted(
        [(subscription.id, "queued")] * 40
        + [(subscription.id, "completed")] * 40
        + [("notify", "completed")] * 40
    )
    assert len({(d.event_id, d.subscription_id) for d in deliveries}) == 120
    assert hooks.outbox.of_job("alice", plain) == []
    (bob,) = {d.url for d in hooks.outbox.of_job("bob", bobs, limit=1000)}
    assert bob == "http://127.0.0.1:9/b"
    assert len(hooks.outbox.of_subscription(subscription.id, limit=1000)) == 80
    replica.stop()


def test_a_receiver_down_at_first_gets_each_event_once_signed(store: JobStore) -> None:
    receiver = Receiver()
    replica = Replica(store)
    events = ListedEvents()
    hooks = webhooks(store, replica, events)
    subscription, secret = hooks.subscriptions.create(
        "alice",
        SubscriptionRequest(url=f"http://127.0.0.1:{receiver.port}/hook", events=["completed"]),
    )
    jobs = [job(store, "alice") for _ in range(5)]
    for job_id in jobs:
        events.add("alice", job_id, "completed")
    hooks.start(render=render)
    try:
        until(
            lambda: (
                len(hooks.outbox.of_subscription(subscription.id)) == 5
                and all(
                    d.attempts >= 2 and d.last_error and "ConnectError" in d.last_error
                    for d in hooks.outbox.of_subscription(subscription.id)
                )
            ),
            what="every delivery failed twice while the receiver is down",
        )
        receiver.start()
        until(all_delivered(hooks, subscription.id), what="delivered once the receiver is up")
    finally:
        hooks.stop()
        replica.stop()
        receiver.stop()
    seen = receiver.verified({"/hook": secret})
    assert sorted(event["job_id"] for event in seen.values()) == sorted(jobs)
    assert {event["state"] for event in seen.values()} == {"completed"}
    shown = hooks.outbox.of_subscription(subscription.id)
    assert all(d.last_status == 204 and d.next_attempt_at is None for d in shown)


def test_a_dead_replicas_claims_are_taken_over_after_the_claim_time(store: JobStore) -> None:
    receiver = Receiver().start()
    port = receiver.port
    first, second = Replica(store), Replica(store)
    dying = webhooks(store, first, claim_time=1.0)
    events = ListedEvents()
    subscription, _ = dying.subscriptions.create(
        "alice", SubscriptionRequest(url=f"http://127.0.0.1:{port}/h", events=["queued"])
    )
    for _ in range(3):
        events.add("alice", job(store, "alice"), "queued")
    Dispatcher(
        events=events,
        render=render,
        outbox=dying.outbox,
        subscriptions=dying.subscriptions,
        store=store,
        clock=time.time,
    ).run_once()
    claimed = dying.outbox.claim(first.id, limit=10, hold=1.0, per_owner=10, busy={})
    assert len(claimed) == 3  # and then `first` dies without sending
    survivor = webhooks(store, second, events, claim_time=1.0)
    assert survivor.outbox.claim(second.id, limit=10, hold=1.0, per_owner=10, busy={}) == []
    survivor.start(render=render)
    try:
        until(all_delivered(survivor, subscription.id), what="the survivor delivered them")
    finally:
        survivor.stop()
        receiver.stop()
        second.stop()
    assert len({headers["X-IRI-Delivery-ID"] for _, headers, _ in receiver.got}) == 3


def test_a_batch_whose_cursor_moved_is_not_written(store: JobStore) -> None:
    hooks = webhooks(store, Replica(store))
    assert hooks.outbox.cursor() == 0
    row: dict[str, object] = {
        "id": "d-1",
        "owner": "alice",
        "target": "notify",
        "subscription_id": None,
        "job_id": None,
        "resource_id": "local",
        "event_id": 1,
        "event_state": "queued",
        "url": "http://127.0.0.1:9/",
        "body": "{}",
        "status": "pending",
        "attempts": 0,
        "created_at": 1.0,
        "next_attempt_at": 1.0,
        "claimed_by": None,
        "claimed_until": None,
        "last_status": None,
        "last_error": None,
        "finished_at": None,
    }
    assert hooks.outbox.fan_out(0, 1, [row])
    assert not hooks.outbox.fan_out(0, 1, [{**row, "id": "d-2"}])  # read at 0, now at 1
    assert hooks.outbox.cursor() == 1
    assert not hooks.outbox.fan_out(1, 2, [{**row, "id": "d-3"}])  # (event, target) twice
    assert hooks.outbox.cursor() == 1  # nothing of that transaction stayed
    with store.engine.connect() as connection:
        ids = connection.exec_driver_sql("SELECT id FROM webhook_deliveries").scalars().all()
    assert ids == ["d-1"]


def test_one_users_backlog_leaves_room_for_the_others(store: JobStore) -> None:
    """Alice's 10 due deliveries (a receiver that hangs, say) take at most `per_owner` of
    the senders; Bob's one is claimed in the same round."""
    replica = Replica(store)
    hooks = webhooks(store, replica)
    events = ListedEvents()
    for owner, count in (("alice", 10), ("bob", 1)):
        hooks.subscriptions.create(
            owner, SubscriptionRequest(url=f"http://127.0.0.1:9/{owner}", events=["queued"])
        )
        for _ in range(count):
            events.add(owner, job(store, owner), "queued")
    Dispatcher(
        events=events,
        render=render,
        outbox=hooks.outbox,
        subscriptions=hooks.subscriptions,
        store=store,
        clock=time.time,
    ).run_once()
    claimed = hooks.outbox.claim(replica.id, limit=4, hold=5, per_owner=2, busy={})
    assert sorted(d.owner for d in claimed) == ["alice", "alice", "bob"]
    more = hooks.outbox.claim(replica.id, limit=4, hold=5, per_owner=2, busy={"alice": 2})
    assert more == []  # alice's two are busy; the claimed ones are held
    replica.stop()
