"""The per-user limits at the API.

The request rate limit: every authenticated request is counted against its
user's budget once the caller is known (`deps.get_principal` calls `charge_request`), so
an unauthenticated request is never counted (it is a 401 anyway) and `/health` and
`/ready`, which ask for no caller, are never limited. Reads and writes have budgets of their
own (`service.rate_limits`): a read is a request that changes nothing, a GET or HEAD or one
of the operations the IRI API sends as POST with its parameters in a body although they only
look (`reads.READ_OPERATIONS`: `ls`, `stat`, `getJobs`, ...); a write is every other request.

The active-jobs quota of a launch (`check_launch_quota`): the resource's
`limits.active_jobs_per_user`, else the setting (`service.quotas`)."""

from __future__ import annotations

from fastapi import Request

from iri_gateway.api.plumbing.reads import is_read
from iri_gateway.service.accounts.auth import Principal
from iri_gateway.service.accounts.rate_limits import READ, WRITE, RateLimiter
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.operations.settings import Settings


def charge_request(request: Request, principal: Principal) -> None:
    """Count this request of the caller's, or refuse it (`RateLimitError`: 429)."""
    limiter: RateLimiter = request.app.state.rate_limiter
    limiter.charge(principal.user, READ if is_read(request) else WRITE)


def rate_limiter(settings: Settings, engine: Engine) -> RateLimiter:
    """The limiter of the settings' rates, sharing counts through the engine's store."""
    return engine.rate_limiter(
        read_rate=settings.read_rate,
        write_rate=settings.write_rate,
        window=settings.rate_window,
        sync_interval=settings.rate_sync_interval,
    )


def check_launch_quota(
    engine: Engine,
    settings: Settings,
    principal: Principal,
    resource_id: str,
    idempotency_key: str | None,
) -> None:
    """QuotaError (429) when the caller has their quota of unfinished jobs on the resource
    (its profile's `limits.active_jobs_per_user`, else the setting) already; a retry of a
    launch (its idempotency key known) is a read, never refused."""
    engine.check_launch_quota(
        owner=principal.user,
        resource_id=resource_id,
        limit=launch_quota(engine, settings, resource_id),
        idempotency_key=idempotency_key,
    )


def launch_quota(engine: Engine, settings: Settings, resource_id: str) -> int:
    """The unfinished jobs a user may hold on the resource: its profile's
    `limits.active_jobs_per_user`, else the setting."""
    own = engine.resource(resource_id=resource_id).resource.limits.active_jobs_per_user
    return own or settings.active_jobs_per_user
