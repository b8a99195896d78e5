"""Users' standing webhook subscriptions and their notify secrets, in the store.

Ownership is the jobs' rule: a user sees and deletes only their own subscriptions; another
user's is "not found", never "forbidden". Secrets are made by the server
(`secrets.token_urlsafe`), shown once when made, and never again: reads show the rest.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import sessionmaker

from iri_gateway.errors import GatewayError
from iri_gateway.models.webhooks import SubscriptionRequest
from iri_gateway.service.operations.schema import (
    WebhookDeliveryRow,
    WebhookSecretRow,
    WebhookSubscriptionRow,
)
from iri_gateway.service.operations.store import JobStore

SECRET_BYTES = 32
"""Random bytes of a secret (43 URL-safe characters)."""


class SubscriptionNotFoundError(GatewayError):
    """No subscription with that id belongs to the caller (404)."""

    code = "subscription_not_found"


class SubscriptionLimitError(GatewayError):
    """The caller keeps as many subscriptions as the operator allows (409)."""

    code = "subscription_limit"


@dataclass(frozen=True)
class Subscription:
    """A standing subscription, without its secret."""

    id: str
    owner: str
    url: str
    events: list[str]
    resource_id: str | None
    created_at: float


@dataclass(frozen=True)
class Target:
    """Where the outbox sends one kind of delivery: a subscription, or a job's `notify`."""

    target: str
    subscription_id: str | None
    url: str
    events: list[str]
    resource_id: str | None
    since: float


def _subscription(row: WebhookSubscriptionRow) -> Subscription:
    return Subscription(
        row.id, row.owner, row.url, list(row.events), row.resource_id, row.created_at
    )


class SubscriptionStore:
    """Subscriptions and notify secrets (the job store's database, written in its turns)."""

    def __init__(
        self, store: JobStore, *, per_user: int, clock: Callable[[], float] = time.time
    ) -> None:
        self._sessions = sessionmaker(store.engine, expire_on_commit=False)
        self._writing = store.writing
        self._clock = clock
        self.per_user = per_user

    def create(self, owner: str, request: SubscriptionRequest) -> tuple[Subscription, str]:
        """Record `owner`'s subscription; it and its secret (shown this once)."""
        with self._sessions() as session:
            kept = session.scalar(
                select(func.count())
                .select_from(WebhookSubscriptionRow)
                .where(WebhookSubscriptionRow.owner == owner)
            )
        if (kept or 0) >= self.per_user:
            raise SubscriptionLimitError(
                f"user {owner!r} keeps {kept} webhook subscriptions, the most one user may "
                f"(webhook_subscriptions_per_user = {self.per_user}); delete one first"
            )
        secret = secrets.token_urlsafe(SECRET_BYTES)
        row = WebhookSubscriptionRow(
            id=str(uuid.uuid4()),
            owner=owner,
            url=request.url,
            events=list(request.events),
            resource_id=request.resource_id,
            secret=secret,
            created_at=self._clock(),
        )
        with self._writing() as session:
            session.add(row)
        return _subscription(row), secret

    def listed(self, owner: str) -> list[Subscription]:
        with self._sessions() as session:
            rows = session.scalars(
                select(WebhookSubscriptionRow)
                .where(WebhookSubscriptionRow.owner == owner)
                .order_by(WebhookSubscriptionRow.created_at, WebhookSubscriptionRow.id)
            ).all()
            return [_subscription(row) for row in rows]

    def get(self, owner: str, subscription_id: str) -> Subscription:
        """`owner`'s subscription; SubscriptionNotFoundError for anyone else's or none."""
        with self._sessions() as session:
            row = session.get(WebhookSubscriptionRow, subscription_id)
            if row is None or row.owner != owner:
                raise SubscriptionNotFoundError(f"no subscription {subscription_id!r}")
            return _subscription(row)

    def delete(self, owner: str, subscription_id: str) -> None:
        """Delete `owner`'s subscription and its deliveries (pending ones are not sent)."""
        with self._writing() as session:
            row = session.get(WebhookSubscriptionRow, subscription_id)
            if row is None or row.owner != owner:
                raise SubscriptionNotFoundError(f"no subscription {subscription_id!r}")
            session.execute(
                delete(WebhookDeliveryRow).where(
                    WebhookDeliveryRow.subscription_id == subscription_id
                )
            )
            session.delete(row)

    def targets(self, owners: Sequence[str]) -> dict[str, list[Target]]:
        """Every subscription of `owners`, as the outbox's targets, by owner."""
        found: dict[str, list[Target]] = {}
        if not owners:
            return found
        with self._sessions() as session:
            rows = session.scalars(
                select(WebhookSubscriptionRow).where(
                    WebhookSubscriptionRow.owner.in_(list(set(owners)))
                )
            ).all()
            for row in rows:
                found.setdefault(row.owner, []).append(
                    Target(
                        row.id, row.id, row.url, list(row.events), row.resource_id, row.created_at
                    )
                )
        return found

    def secret(self, owner: str, subscription_id: str | None) -> str | None:
        """The secret a delivery of `owner` is signed with: its subscription's, or (None)
        the owner's notify secret; None when that is gone."""
        with self._sessions() as session:
            if subscription_id is None:
                notify = session.get(WebhookSecretRow, owner)
                return notify.secret if notify is not None else None
            row = session.get(WebhookSubscriptionRow, subscription_id)
            return row.secret if row is not None and row.owner == owner else None

    # ---- notify secrets ------------------------------------------------------------------

    def new_notify_secret(self, owner: str) -> tuple[str, float]:
        """A new notify secret for `owner`'s jobs (replacing any earlier one: deliveries
        not yet sent are signed with the new one); it and its time, shown this once."""
        secret, now = secrets.token_urlsafe(SECRET_BYTES), self._clock()
        for _attempt in range(2):  # two first ones at once: the loser's insert becomes an update
            try:
                with self._writing() as session:
                    row = session.get(WebhookSecretRow, owner)
                    if row is None:
                        session.add(WebhookSecretRow(owner=owner, secret=secret, created_at=now))
                    else:
                        row.secret, row.created_at = secret, now
                return secret, now
            except IntegrityError:
                continue
        raise SubscriptionLimitError(f"the notify secret of {owner!r} is being made; try again")

    def notify_secret_made(self, owner: str) -> float | None:
        """When `owner`'s notify secret was made (None: never)."""
        with self._sessions() as session:
            row = session.get(WebhookSecretRow, owner)
            return row.created_at if row is not None else None
