"""`GET /api/v2/account/whoami`: the caller's user name, as the IRI reference implementation
answers it.

The reference implementation (doe-iri/iri-facility-api-python, `app/routers/account/`) serves
`whoami` under its `account` routes, operationId `whoami`, answering `{"username": ...}` and
marking it `x-iri: {maturity: production, implementation: {level: required}}`; the official
document this gateway follows (openapi/official/iri-facility-api-v2.openapi.yaml) does not
have it yet. So it is served here with the reference's path, operationId, shape and marker,
tagged `account` as there and `extensions` because the official document lacks it. It says
no more than the token does: the user name, nothing secret (`getMe` adds projects and role).
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import PrincipalDep

router = APIRouter(
    prefix="/api/v2/account", tags=["account", "extensions"], route_class=CallerFirstRoute
)

REFERENCE_MARKER = {"x-iri": {"maturity": "production", "implementation": {"level": "required"}}}
"""The reference implementation's own marker of the operation, kept as it has it."""


class WhoAmI(BaseModel):
    """The authenticated caller's username (the reference implementation's `WhoAmI`)."""

    model_config = ConfigDict(extra="forbid")

    username: str = Field(
        description="Unique identifier of the authenticated user: the gateway user the "
        "bearer token stands for",
        examples=["alice"],
    )


@router.get(
    "/whoami",
    operation_id="whoami",
    response_model=WhoAmI,
    summary="Get the authenticated user's username",
    description="Authenticate the caller and return their username (the IRI reference "
    "implementation's operation, not yet in the official document: extension).",
    responses={401: {"description": "No valid bearer token"}},
    openapi_extra=REFERENCE_MARKER,
)
async def whoami(principal: PrincipalDep) -> WhoAmI:
    """The caller's user name, from its token."""
    return WhoAmI(username=principal.user)
