"""Account extension: `GET /account/limits`, the caller's limits and their use now.

A client that was refused (429 past a request rate or a quota) or wants to stay
clear of that asks here: each request rate with the requests counted in the sliding window,
the unfinished-task quota, and each resource's active-jobs quota with the caller's count
there. The console shows it on the Account page.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import EngineDep, PrincipalDep, SettingsDep
from iri_gateway.service.accounts.rate_limits import RateLimiter

router = APIRouter(prefix="/api/v2/account", tags=["extensions"], route_class=CallerFirstRoute)


class RateUse(BaseModel):
    """One request rate of the caller's and its use."""

    limit: str = Field(
        description="The setting: `read_rate` (requests that change nothing: GET, HEAD and the "
        "looking POSTs such as `ls`, `stat`, `getJobs`) or `write_rate` (every other request)"
    )
    per_second: float = Field(description="Requests per second allowed, averaged over the window")
    window_seconds: float = Field(description="Length of the sliding window")
    used: float = Field(
        description="Requests counted in the window now, over every replica "
        "(as this replica last heard; this request included)"
    )
    allowed: float = Field(description="Requests the window holds: per_second x window")


class QuotaUse(BaseModel):
    """One quota of the caller's and its use."""

    limit: str = Field(description="The setting (or profile `limits` field) that sets it")
    resource_id: str | None = Field(
        default=None, description="The resource it holds on; none: every resource"
    )
    limit_value: int = Field(description="The most the caller may have at once")
    used: int = Field(description="What the caller has now")


class Limits(BaseModel):
    """The caller's limits and their use: past a rate or a quota the API answers 429 with
    Retry-After."""

    user: str = Field(description="The caller")
    rates: list[RateUse] = Field(description="Request rates, per user over every replica")
    quotas: list[QuotaUse] = Field(description="What the caller may hold at once")
    tasks_running_per_user: int = Field(
        description="Background tasks of one user each gateway process runs at once; more "
        "wait `pending` while other users' tasks are started first"
    )


@router.get(
    "/limits",
    operation_id="getLimits",
    response_model=Limits,
    summary="Get the caller's rate limits and quotas, with their use (extension)",
)
def get_limits(
    request: Request, principal: PrincipalDep, engine: EngineDep, settings: SettingsDep
) -> Limits:
    """The caller's request rates and quotas, and how much of each is used now."""
    limiter: RateLimiter = request.app.state.rate_limiter
    rates = [
        RateUse(
            limit=use.limit,
            per_second=use.rate,
            window_seconds=use.window,
            used=round(use.used, 1),
            allowed=use.rate * use.window,
        )
        for use in limiter.usage(principal.user)
    ]
    quotas = [
        QuotaUse(
            limit="tasks_per_user",
            limit_value=engine.tasks.unfinished_limit,
            used=engine.tasks.unfinished(principal.user),
        )
    ]
    for loaded in engine.resources():
        own = loaded.resource.limits
        if own.tasks_per_user is not None:
            quotas.append(
                QuotaUse(
                    limit="tasks_per_user",
                    resource_id=loaded.id,
                    limit_value=own.tasks_per_user,
                    used=quotas[0].used,
                )
            )
        quotas.append(
            QuotaUse(
                limit="active_jobs_per_user",
                resource_id=loaded.id,
                limit_value=own.active_jobs_per_user or settings.active_jobs_per_user,
                used=engine.active_jobs(owner=principal.user, resource_id=loaded.id),
            )
        )
    return Limits(
        user=principal.user,
        rates=rates,
        quotas=quotas,
        tasks_running_per_user=engine.tasks.per_user,
    )
