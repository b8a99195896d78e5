"""Sending one claimed delivery: check the destination again, sign, POST, record.

At least once: a delivery is recorded delivered only after a 2xx; an attempt whose answer
is lost (a replica killed mid-POST) is sent again, with the same `X-IRI-Delivery-ID`, once
its claim has run out. Failures are retried with exponential back-off and jitter — the
pause doubles from `retry_first` up to `retry_longest`, each a random time between half and
all of it, so that many deliveries failed together do not come back together — until
`max_age` after the delivery was made; then it is given up (`failed`, its last error kept).
A destination the rules refuse at delivery time (DNS now answers a private address, the
operator narrowed the rules) is given up at once, the reason recorded.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

from iri_gateway.service.webhooks import signing
from iri_gateway.service.webhooks.destinations import (
    DestinationPolicy,
    DestinationRefusedError,
    DestinationUnresolvedError,
)
from iri_gateway.service.webhooks.outbox import Delivery, Outbox
from iri_gateway.service.webhooks.pinned import Outcome, post
from iri_gateway.service.webhooks.subscriptions import SubscriptionStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Retries:
    """How failed deliveries are tried again (settings `webhook_retry_*`, `webhook_max_age`)."""

    first: float
    longest: float
    max_age: float

    def pause(self, attempts: int, draw: Callable[[float, float], float] = random.uniform) -> float:
        """Seconds before the attempt after `attempts` failed ones: jittered doubling."""
        full = min(self.longest, self.first * 2 ** max(0, attempts - 1))
        return draw(full / 2, full)


class Sender:
    """Sends claimed deliveries and records each attempt in the outbox."""

    def __init__(
        self,
        *,
        outbox: Outbox,
        subscriptions: SubscriptionStore,
        policy: DestinationPolicy,
        retries: Retries,
        timeout: float,
        replica_id: str,
        clock: Callable[[], float],
    ) -> None:
        self._outbox = outbox
        self._subscriptions = subscriptions
        self._policy = policy
        self._retries = retries
        self._timeout = timeout
        self._replica_id = replica_id
        self._clock = clock

    def send(self, delivery: Delivery) -> Outcome:
        """One attempt of `delivery`, recorded; its outcome."""
        secret = self._subscriptions.secret(delivery.owner, delivery.subscription_id)
        if secret is None:
            what = (
                "its subscription was deleted"
                if delivery.subscription_id
                else ("no notify secret (POST /api/v2/compute/notify-secret)")
            )
            return self._record(delivery, Outcome(None, f"not sent: {what}"), give_up=True)
        try:
            destination = self._policy.check(delivery.url)
        except DestinationRefusedError as refused:
            return self._record(delivery, Outcome(None, f"refused: {refused.reason}"), give_up=True)
        except DestinationUnresolvedError as unresolved:
            return self._record(delivery, Outcome(None, str(unresolved)), give_up=False)
        body = delivery.body.encode()
        timestamp = int(self._clock())
        outcome = post(
            destination,
            body,
            signing.headers(
                secret, timestamp, body, delivery_id=delivery.id, event_id=delivery.event_id
            ),
            timeout=self._timeout,
        )
        return self._record(delivery, outcome, give_up=False)

    def _record(self, delivery: Delivery, outcome: Outcome, *, give_up: bool) -> Outcome:
        now = self._clock()
        if outcome.delivered:
            status, next_at = "delivered", None
        else:
            next_at = now + self._retries.pause(delivery.attempts + 1)
            late = next_at > delivery.created_at + self._retries.max_age
            status = "failed" if give_up or late else "pending"
        recorded = self._outbox.finish(
            delivery.id,
            self._replica_id,
            status=status,
            code=outcome.status,
            error=outcome.error,
            next_at=next_at,
        )
        log.info(
            "webhook delivery %s (event %s) attempt %d: %s%s",
            delivery.id,
            delivery.event_id,
            delivery.attempts + 1,
            status,
            f" ({outcome.error})" if outcome.error else "",
        )
        if not recorded:
            log.info("webhook delivery %s was taken over by another replica", delivery.id)
        return outcome
