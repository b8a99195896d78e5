"""The store's facts as Prometheus series, computed when scraped: the same whichever replica
(or worker) answers, since every replica reads the one shared store.

Why at scrape time: jobs by state, the replicas' heartbeats and the tasks waiting are global
facts; counting them as they change in each process would give every replica its own,
different, partial count. Three small aggregate queries per scrape (a `GROUP BY` over the
jobs' indexed state, the replicas heard from lately, the unfinished tasks).

Bounded labels: resources and states come from the profiles and the code; replicas are
those heard from within `RECENT_REPLICAS` seconds; the per-user task queue names only the
`task_users` users with the most unfinished tasks, every other user added up under `user=""`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily, Metric
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from iri_gateway.service.operations.schema import JobRow, ReplicaRow, TaskRow

if TYPE_CHECKING:
    from iri_gateway.service.operations.store import JobStore

RECENT_REPLICAS = 3600.0
"""Replicas not stopped and heard from within this many seconds get a heartbeat series (a
replica killed an hour ago is gone from the series, not alerted on forever)."""

UNFINISHED_TASKS = ("pending", "active")


class StoreFacts:
    """A Prometheus collector: jobs by resource and state, replica heartbeat ages, tasks
    waiting per user; `iri_gateway_store_up` 0 (and no facts) when the store cannot answer."""

    def __init__(self, store: JobStore, *, task_users: int, now: Callable[[], float]) -> None:
        self.store = store
        self.task_users = task_users
        self.now = now

    def describe(self) -> list[Metric]:
        return []  # registered without a trial collect: no query at registration

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "iri_gateway_store_up", "1 when the store answered the scrape's queries, else 0"
        )
        try:
            families = list(self._facts())
        except SQLAlchemyError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _facts(self) -> Iterator[Metric]:
        now = self.now()
        with self.store.engine.connect() as connection:
            jobs = connection.execute(
                select(JobRow.resource_id, JobRow.state, func.count()).group_by(
                    JobRow.resource_id, JobRow.state
                )
            ).all()
            replicas = connection.execute(
                select(ReplicaRow.id, ReplicaRow.host, ReplicaRow.heartbeat_at).where(
                    ReplicaRow.stopped_at.is_(None),
                    ReplicaRow.heartbeat_at > now - RECENT_REPLICAS,
                )
            ).all()
            tasks = connection.execute(
                select(TaskRow.owner, TaskRow.status, func.count())
                .where(TaskRow.status.in_(UNFINISHED_TASKS))
                .group_by(TaskRow.owner, TaskRow.status)
            ).all()
        by_state = GaugeMetricFamily(
            "iri_gateway_jobs",
            "Jobs in the store, by resource and state",
            labels=["resource", "state"],
        )
        for resource, state, count in jobs:
            by_state.add_metric([resource, state], count)
        yield by_state
        ages = GaugeMetricFamily(
            "iri_gateway_replica_heartbeat_age_seconds",
            "Seconds since each running replica's last heartbeat (dead past the replica "
            "timeout), by replica id and host",
            labels=["replica", "host"],
        )
        for replica, host, beat in replicas:
            ages.add_metric([replica, host], max(0.0, now - beat))
        yield ages
        yield from self._task_queue(tasks)

    def _task_queue(self, rows: Sequence[Any]) -> Iterator[Metric]:
        per_user: Counter[str] = Counter()
        queue = GaugeMetricFamily(
            "iri_gateway_task_queue_depth",
            "Unfinished filesystem tasks (pending or active) of the users with the most, by "
            'user; user="" adds up every other user',
            labels=["user", "state"],
        )
        for owner, _, count in rows:
            per_user[owner] += count
        named = {user for user, _ in per_user.most_common(self.task_users)}
        totals: Counter[tuple[str, str]] = Counter()
        for owner, status, count in rows:
            totals[(owner if owner in named else "", status)] += count
        for (user, status), count in sorted(totals.items()):
            queue.add_metric([user, status], count)
        yield queue
