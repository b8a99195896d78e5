"""Compute extension: webhooks. Standing subscriptions, the notify secret, delivery status.

`POST/GET /compute/subscriptions`, `GET/DELETE /compute/subscriptions/{id}`,
`GET /compute/subscriptions/{id}/deliveries`, `GET /compute/job/{resource}/{job}/deliveries`
and `POST/GET /compute/notify-secret`. A user sees and touches only their own (another
user's subscription is "not found", never "forbidden"). Secrets are shown once, in the
answer that made them. Views are thin: they call the engine's webhooks service.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Response
from pydantic import BaseModel, Field

from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import EngineDep, PrincipalDep
from iri_gateway.models.webhooks import SubscriptionRequest
from iri_gateway.service.jobs.engine import JobNotFoundError
from iri_gateway.service.webhooks.outbox import Delivery
from iri_gateway.service.webhooks.subscriptions import Subscription

router = APIRouter(prefix="/api/v2/compute", tags=["extensions"], route_class=CallerFirstRoute)

SubscriptionId = Annotated[
    str, Path(description="The subscription's id", min_length=1, max_length=36)
]


class SubscriptionView(BaseModel):
    """A standing webhook subscription (its secret is shown only when it is made)."""

    id: str = Field(description="The subscription's id")
    url: str = Field(description="Where its deliveries are POSTed")
    events: list[str] = Field(description="The job states it is told about")
    resource_id: str | None = Field(description="Only jobs of this resource (null: every one)")
    created_at: float = Field(description="When it was made, seconds since the epoch")

    @classmethod
    def of(cls, subscription: Subscription) -> SubscriptionView:
        return cls(
            id=subscription.id,
            url=subscription.url,
            events=subscription.events,
            resource_id=subscription.resource_id,
            created_at=subscription.created_at,
        )


class SubscriptionCreated(SubscriptionView):
    """A subscription just made, with its secret: shown this once, never again."""

    secret: str = Field(
        description="The HMAC-SHA256 key its deliveries are signed with (X-IRI-Signature); "
        "shown only in this answer: keep it"
    )


class NotifySecret(BaseModel):
    """Your jobs' notify secret, just made: shown this once, never again."""

    secret: str = Field(
        description="The HMAC-SHA256 key the deliveries of your jobs' `notify` are signed "
        "with from now on (it replaces any earlier one); shown only in this answer"
    )
    created_at: float = Field(description="When it was made, seconds since the epoch")


class NotifySecretState(BaseModel):
    """Whether you have a notify secret (never the secret itself)."""

    exists: bool = Field(description="True when you have one")
    created_at: float | None = Field(description="When it was made (null: never)")


class DeliveryView(BaseModel):
    """One delivery of one event to one webhook, and how its attempts went."""

    id: str = Field(
        description="The delivery's id, sent as X-IRI-Delivery-ID (the same on "
        "every attempt: deduplicate by it)"
    )
    event_id: int = Field(description="The event's id (X-IRI-Event-ID; the stream's `id`)")
    state: str = Field(description="The job state the event is about")
    subscription_id: str | None = Field(description="Its subscription (null: the job's notify)")
    job_id: str | None = Field(description="The job")
    resource_id: str | None = Field(description="The job's resource")
    url: str = Field(description="Where it is sent")
    status: str = Field(
        description="`pending` (to be tried, at next_attempt_at), `delivered` (a 2xx came "
        "back) or `failed` (given up: max age passed, or the destination refused)"
    )
    attempts: int = Field(description="Attempts made so far")
    created_at: float = Field(description="When it was made, seconds since the epoch")
    next_attempt_at: float | None = Field(description="When it is tried next (pending only)")
    last_status_code: int | None = Field(description="The last answer's HTTP status, if any")
    last_error: str | None = Field(description="Why the last attempt failed, if it did")
    finished_at: float | None = Field(description="When it was delivered or given up")

    @classmethod
    def of(cls, delivery: Delivery) -> DeliveryView:
        return cls(
            id=delivery.id,
            event_id=delivery.event_id,
            state=delivery.event_state,
            subscription_id=delivery.subscription_id,
            job_id=delivery.job_id,
            resource_id=delivery.resource_id,
            url=delivery.url,
            status=delivery.status,
            attempts=delivery.attempts,
            created_at=delivery.created_at,
            next_attempt_at=delivery.next_attempt_at,
            last_status_code=delivery.last_status,
            last_error=delivery.last_error,
            finished_at=delivery.finished_at,
        )


@router.post(
    "/subscriptions",
    operation_id="createSubscription",
    response_model=SubscriptionCreated,
    status_code=201,
    summary="Subscribe a webhook to your jobs' events (extension)",
)
def create_subscription(
    request: Annotated[SubscriptionRequest, Body()], engine: EngineDep, principal: PrincipalDep
) -> SubscriptionCreated:
    """Register a URL to be POSTed every event of your jobs whose state is in `events`
    (optionally only on `resource_id`). 400 when the operator's rules refuse the URL (not
    https, a private or loopback address, ...), naming why; 409 past the limit per user.
    The answer holds the secret deliveries are signed with: shown this once."""
    subscription, secret = engine.webhooks.subscribe(principal.user, request)
    return SubscriptionCreated(**SubscriptionView.of(subscription).model_dump(), secret=secret)


@router.get(
    "/subscriptions",
    operation_id="listSubscriptions",
    response_model=list[SubscriptionView],
    summary="List your webhook subscriptions (extension)",
)
def list_subscriptions(engine: EngineDep, principal: PrincipalDep) -> list[SubscriptionView]:
    """Your subscriptions, oldest first (without their secrets)."""
    return [SubscriptionView.of(s) for s in engine.webhooks.listed(principal.user)]


@router.get(
    "/subscriptions/{subscription_id}",
    operation_id="getSubscription",
    response_model=SubscriptionView,
    summary="Get a webhook subscription (extension)",
)
def get_subscription(
    subscription_id: SubscriptionId, engine: EngineDep, principal: PrincipalDep
) -> SubscriptionView:
    """One of your subscriptions (404 for any other)."""
    return SubscriptionView.of(engine.webhooks.subscription(principal.user, subscription_id))


@router.delete(
    "/subscriptions/{subscription_id}",
    operation_id="deleteSubscription",
    status_code=204,
    summary="Delete a webhook subscription (extension)",
)
def delete_subscription(
    subscription_id: SubscriptionId, engine: EngineDep, principal: PrincipalDep
) -> Response:
    """Delete one of your subscriptions and its deliveries (pending ones are not sent)."""
    engine.webhooks.unsubscribe(principal.user, subscription_id)
    return Response(status_code=204)


@router.get(
    "/subscriptions/{subscription_id}/deliveries",
    operation_id="listSubscriptionDeliveries",
    response_model=list[DeliveryView],
    summary="A webhook subscription's deliveries (extension)",
)
def subscription_deliveries(
    subscription_id: SubscriptionId, engine: EngineDep, principal: PrincipalDep
) -> list[DeliveryView]:
    """The newest 100 deliveries of one of your subscriptions, newest first, with their
    attempts, last status code or error and next attempt time."""
    found = engine.webhooks.subscription_deliveries(principal.user, subscription_id)
    return [DeliveryView.of(delivery) for delivery in found]


@router.get(
    "/job/{resource_id}/{job_id}/deliveries",
    operation_id="listJobDeliveries",
    response_model=list[DeliveryView],
    summary="The webhook deliveries about a job (extension)",
)
def job_deliveries(
    resource_id: str, job_id: str, engine: EngineDep, principal: PrincipalDep
) -> list[DeliveryView]:
    """The newest 100 deliveries about one of your jobs (its `notify` and your
    subscriptions'), newest first; 404 for anyone else's job."""
    record = engine.get(owner=principal.user, job_id=job_id)
    if record.resource_id != resource_id:
        raise JobNotFoundError(f"no job {job_id!r} on {resource_id!r}")
    return [DeliveryView.of(d) for d in engine.webhooks.job_deliveries(principal.user, job_id)]


@router.post(
    "/notify-secret",
    operation_id="createNotifySecret",
    response_model=NotifySecret,
    status_code=201,
    summary="Make your jobs' notify secret (extension)",
)
def create_notify_secret(engine: EngineDep, principal: PrincipalDep) -> NotifySecret:
    """Make the secret your jobs' `notify` deliveries are signed with, replacing any
    earlier one (deliveries not yet sent are signed with the new one). Shown this once."""
    secret, made = engine.webhooks.new_notify_secret(principal.user)
    return NotifySecret(secret=secret, created_at=made)


@router.get(
    "/notify-secret",
    operation_id="getNotifySecret",
    response_model=NotifySecretState,
    summary="Whether you have a notify secret (extension)",
)
def get_notify_secret(engine: EngineDep, principal: PrincipalDep) -> NotifySecretState:
    """Whether you have a notify secret, and when it was made; never the secret."""
    made = engine.webhooks.notify_secret_made(principal.user)
    return NotifySecretState(exists=made is not None, created_at=made)
