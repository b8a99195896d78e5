"""Account extension: `GET /account/me`, who the caller's token says it is.

The official account operations answer projects, but not the caller's roles, and a token
without projects cannot even say whose it is. The console asks here once per page to greet
the caller and to offer the admins' pages (Profiles) only to admins; the API itself still
refuses a non-admin on every admin-only route.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import PrincipalDep
from iri_gateway.api.plumbing.official import utc_timestamp

router = APIRouter(prefix="/api/v2/account", tags=["extensions"], route_class=CallerFirstRoute)


class Me(BaseModel):
    """The authenticated caller: its user name, the projects it may charge, its role."""

    user: str = Field(description="The gateway user the token stands for")
    projects: list[str] = Field(
        description="Projects the token itself grants, which launchJob may charge on every "
        "resource; a resource's project rules may grant more there from the caller's "
        "claims (getProjects lists them all)"
    )
    admin: bool = Field(
        description="True for a facility admin (`iri-gateway token USER --admin`, or the "
        "identity provider's admin role): may call admin-only routes such as checkProfile"
    )
    access: Literal["read", "write"] = Field(
        description="`write`: the token may also change (submit, cancel, write files); "
        "`read`: it may only read, and every operation marked `x-iri-gateway-access: "
        "write` answers it 403"
    )
    expires: datetime | None = Field(
        description="When the token stops being valid (UTC); null: no end known"
    )


@router.get(
    "/me",
    operation_id="getMe",
    response_model=Me,
    summary="Get the current user, its projects, role and token class (extension)",
    responses={401: {"description": "No valid bearer token"}},
)
async def get_me(principal: PrincipalDep) -> Me:
    """The caller as its token describes it."""
    return Me(
        user=principal.user,
        projects=list(principal.projects),
        admin=principal.admin,
        access=principal.access,
        expires=None if principal.expires is None else utc_timestamp(principal.expires),
    )
