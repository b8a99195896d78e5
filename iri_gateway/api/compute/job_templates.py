"""Compute extension: job templates, each user's own and the facility's (read-only).

`GET /compute/templates` lists what the caller may name in a job's `template`;
`GET/PUT/DELETE /compute/templates/{name}` read, write and delete one. A user sees and
touches only their own templates (another user's is "not found"). Views are thin: they call
the engine's template book.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Response

from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import EngineDep, PrincipalDep
from iri_gateway.models.job_template_names import TEMPLATE_NAME
from iri_gateway.models.job_templates import StoredTemplate, Template

router = APIRouter(
    prefix="/api/v2/compute", tags=["compute", "extensions"], route_class=CallerFirstRoute
)

NamePath = Annotated[str, Path(description="The template's name", pattern=TEMPLATE_NAME)]


@router.get(
    "/templates",
    operation_id="listJobTemplates",
    response_model=list[StoredTemplate],
    summary="List job templates (extension)",
)
def list_templates(engine: EngineDep, principal: PrincipalDep) -> list[StoredTemplate]:
    """The facility's templates, then the caller's own, by name."""
    return engine.templates.listed(principal.user)


@router.get(
    "/templates/{name}",
    operation_id="getJobTemplate",
    response_model=StoredTemplate,
    summary="Get a job template (extension)",
)
def get_template(name: NamePath, engine: EngineDep, principal: PrincipalDep) -> StoredTemplate:
    """One template: the facility's of that name, else the caller's; 404 names the closest."""
    return engine.templates.get(principal.user, name)


@router.put(
    "/templates/{name}",
    operation_id="putJobTemplate",
    response_model=StoredTemplate,
    summary="Create or replace a job template (extension)",
    responses={201: {"model": StoredTemplate, "description": "Created"}},
)
def put_template(
    name: NamePath,
    template: Annotated[Template, Body()],
    engine: EngineDep,
    principal: PrincipalDep,
    response: Response,
) -> StoredTemplate:
    """Keep a task or cluster template under `name` (201 when new, 200 when replaced).

    409 when a facility template has the name; 422 when a cluster template's role names no
    task template the caller can use."""
    stored, created = engine.templates.put(principal.user, name, template)
    response.status_code = 201 if created else 200
    return stored


@router.delete(
    "/templates/{name}",
    operation_id="deleteJobTemplate",
    status_code=204,
    summary="Delete a job template (extension)",
)
def delete_template(name: NamePath, engine: EngineDep, principal: PrincipalDep) -> Response:
    """Delete one of the caller's templates; a facility template is 409."""
    engine.templates.delete(principal.user, name)
    return Response(status_code=204)
