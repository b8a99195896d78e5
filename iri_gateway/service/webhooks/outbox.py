"""The outbox in the store: deliveries made from events exactly once, claimed, finished.

- `fan_out` inserts an event batch's deliveries and moves the cursor from the id it read to
  the batch's last id in ONE transaction, and only if the cursor still has the id it read
  (a compare-and-set): a crash before the commit leaves neither, so the next dispatcher
  makes them again; two dispatchers for a moment (a lease moving) cannot both commit one
  batch. The unique (event_id, target) makes a double insert impossible besides.
- `claim` takes due deliveries for one replica until `claimed_until`, each by one
  conditional UPDATE (one replica wins); a replica killed with deliveries claimed leaves them
  to the others once the claim time passes.
- `finish` records an attempt: delivered, retried at a later time, or given up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import sessionmaker

from iri_gateway.service.operations.schema import WebhookCursorRow, WebhookDeliveryRow
from iri_gateway.service.operations.store import JobStore

CURSOR = "outbox"
"""The name of the outbox's row in `webhook_cursor`."""
SHOWN_PER_PAGE = 100
"""Deliveries one listing shows at most (the newest)."""


@dataclass(frozen=True)
class Delivery:
    """One row of the outbox, as users and the sender see it."""

    id: str
    owner: str
    subscription_id: str | None
    job_id: str | None
    resource_id: str | None
    event_id: int
    event_state: str
    url: str
    body: str
    status: str
    attempts: int
    created_at: float
    next_attempt_at: float | None
    last_status: int | None
    last_error: str | None
    finished_at: float | None


def _delivery(row: WebhookDeliveryRow) -> Delivery:
    return Delivery(
        row.id,
        row.owner,
        row.subscription_id,
        row.job_id,
        row.resource_id,
        row.event_id,
        row.event_state,
        row.url,
        row.body,
        row.status,
        row.attempts,
        row.created_at,
        row.next_attempt_at,
        row.last_status,
        row.last_error,
        row.finished_at,
    )


class _Moved(Exception):
    """The cursor is not where this dispatcher read it: another one committed first."""


class Outbox:
    """The deliveries table and the outbox's cursor."""

    def __init__(self, store: JobStore, *, clock: Callable[[], float] = time.time) -> None:
        self._sessions = sessionmaker(store.engine, expire_on_commit=False)
        self._writing = store.writing
        self._clock = clock

    # ---- the cursor and fan-out ------------------------------------------------------------

    def cursor(self) -> int:
        """The last event made into deliveries (its row made at 0 the first time)."""
        with self._sessions() as session:
            found = session.get(WebhookCursorRow, CURSOR)
            if found is not None:
                return int(found.event_id)
        try:
            with self._writing() as session:
                session.add(WebhookCursorRow(name=CURSOR, event_id=0))
        except IntegrityError:  # another replica made it first
            return self.cursor()
        return 0

    def fan_out(self, read_from: int, up_to: int, rows: Sequence[dict[str, object]]) -> bool:
        """Insert `rows` (the deliveries of the events after `read_from` up to `up_to`) and
        move the cursor to `up_to`, in one transaction, if the cursor is still
        `read_from`; False (nothing written) when another dispatcher moved it first."""
        try:
            with self._writing() as session:
                moved = session.execute(
                    update(WebhookCursorRow)
                    .where(WebhookCursorRow.name == CURSOR, WebhookCursorRow.event_id == read_from)
                    .values(event_id=up_to)
                    .execution_options(synchronize_session=False)
                )
                if not getattr(moved, "rowcount", 0):
                    raise _Moved  # rolls the transaction back
                if rows:
                    session.execute(insert(WebhookDeliveryRow), list(rows))
        except (_Moved, IntegrityError):  # another dispatcher committed this batch first
            return False
        return True

    # ---- sending -------------------------------------------------------------------------

    def claim(
        self, replica_id: str, *, limit: int, hold: float, per_owner: int, busy: dict[str, int]
    ) -> list[Delivery]:
        """Up to `limit` due deliveries claimed for `replica_id` for `hold` seconds, at most
        `per_owner` per owner counting the ones in `busy` (owner -> sending now), oldest
        first."""
        if limit <= 0:
            return []
        now = self._clock()
        with self._sessions() as session:
            due = session.execute(
                select(WebhookDeliveryRow.id, WebhookDeliveryRow.owner)
                .where(
                    WebhookDeliveryRow.status == "pending",
                    WebhookDeliveryRow.next_attempt_at <= now,
                    or_(
                        WebhookDeliveryRow.claimed_until.is_(None),
                        WebhookDeliveryRow.claimed_until < now,
                    ),
                )
                .order_by(WebhookDeliveryRow.next_attempt_at)
                .limit(limit * 8)
            ).all()
        taken: dict[str, int] = dict(busy)
        chosen: list[str] = []
        for delivery_id, owner in due:
            if len(chosen) >= limit:
                break
            if taken.get(owner, 0) >= per_owner:
                continue
            taken[owner] = taken.get(owner, 0) + 1
            chosen.append(delivery_id)
        claimed: list[Delivery] = []
        for delivery_id in chosen:
            with self._writing() as session:
                won = session.execute(
                    update(WebhookDeliveryRow)
                    .where(
                        WebhookDeliveryRow.id == delivery_id,
                        WebhookDeliveryRow.status == "pending",
                        or_(
                            WebhookDeliveryRow.claimed_until.is_(None),
                            WebhookDeliveryRow.claimed_until < now,
                        ),
                    )
                    .values(claimed_by=replica_id, claimed_until=now + hold)
                    .execution_options(synchronize_session=False)
                )
                if getattr(won, "rowcount", 0):
                    row = session.get(WebhookDeliveryRow, delivery_id)
                    if row is not None:
                        claimed.append(_delivery(row))
        return claimed

    def finish(
        self,
        delivery_id: str,
        replica_id: str,
        *,
        status: str,
        code: int | None,
        error: str | None,
        next_at: float | None,
    ) -> bool:
        """Record one attempt of a delivery `replica_id` claimed: `status` `delivered`,
        `pending` (tried again at `next_at`) or `failed` (given up). False when the claim
        was lost (another replica took the delivery over: its record stands), except for
        `delivered`, which is always recorded while the delivery is pending."""
        now = self._clock()
        done = status != "pending"
        query = update(WebhookDeliveryRow).where(
            WebhookDeliveryRow.id == delivery_id, WebhookDeliveryRow.status == "pending"
        )
        if status != "delivered":
            query = query.where(WebhookDeliveryRow.claimed_by == replica_id)
        with self._writing() as session:
            result = session.execute(
                query.values(
                    status=status,
                    attempts=WebhookDeliveryRow.attempts + 1,
                    last_status=code,
                    last_error=error,
                    next_attempt_at=None if done else next_at,
                    finished_at=now if done else None,
                    claimed_by=None,
                    claimed_until=None,
                ).execution_options(synchronize_session=False)
            )
            return bool(getattr(result, "rowcount", 0))

    # ---- reading and sweeping ------------------------------------------------------------

    def of_subscription(
        self, subscription_id: str, *, limit: int = SHOWN_PER_PAGE
    ) -> list[Delivery]:
        """The newest deliveries of a subscription (the caller checked it is theirs)."""
        with self._sessions() as session:
            rows = session.scalars(
                select(WebhookDeliveryRow)
                .where(WebhookDeliveryRow.subscription_id == subscription_id)
                .order_by(WebhookDeliveryRow.created_at.desc(), WebhookDeliveryRow.id)
                .limit(limit)
            ).all()
            return [_delivery(row) for row in rows]

    def of_job(self, owner: str, job_id: str, *, limit: int = SHOWN_PER_PAGE) -> list[Delivery]:
        """The newest deliveries of `owner`'s job: its `notify` and their subscriptions'."""
        with self._sessions() as session:
            rows = session.scalars(
                select(WebhookDeliveryRow)
                .where(WebhookDeliveryRow.owner == owner, WebhookDeliveryRow.job_id == job_id)
                .order_by(WebhookDeliveryRow.created_at.desc(), WebhookDeliveryRow.id)
                .limit(limit)
            ).all()
            return [_delivery(row) for row in rows]

    def sweep(self, older_than: float) -> int:
        """Delete the deliveries finished before `older_than`; how many."""
        with self._writing() as session:
            result = session.execute(
                delete(WebhookDeliveryRow).where(
                    WebhookDeliveryRow.finished_at.is_not(None),
                    WebhookDeliveryRow.finished_at < older_than,
                )
            )
            return int(getattr(result, "rowcount", 0))
