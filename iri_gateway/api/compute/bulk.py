"""`POST /compute/jobs/{resource_id}` (launchJobs, an extension): many JobSpecs in one call.

The body is a JSON list of JobSpecs, held to `max_request_bytes` like any body (413 before
it is read whole) and to `bulk_max_specs` specs (413 naming the bound, before any spec is
looked at). Each element is then validated here on its own, as launchJob's body is: an
invalid one is refused at its index (422, its fields named `[i].resources.node_count`), and
never fails the call. The answer is one result per spec, in order: its job as launchJob
answers it (`status` 201, or 200 for a job an earlier call with the same key made), or its
problem (`status` 4xx or 5xx, the problem's own, with its `index`). The rest, per spec, is
the engine's (`service.jobs.bulk`): idempotency, quota and rate, one transaction, the wait.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Request, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from iri_gateway.api.compute.models import Job, job_document, json_bytes
from iri_gateway.api.compute.routes import ProjectHeader, _with_account
from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import EngineDep, KnownResource, PrincipalDep, SettingsDep
from iri_gateway.api.plumbing.problems import (
    ApiProblem,
    as_problem,
    validation_params,
)
from iri_gateway.api.plumbing.projects import projects_on
from iri_gateway.api.plumbing.rate_limit import charge_request, launch_quota
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.service.accounts.auth import Principal
from iri_gateway.service.jobs.engine import BulkOutcome

router = APIRouter(prefix="/api/v2/compute", tags=["extensions"], route_class=CallerFirstRoute)

HEADERS = frozenset({"Idempotency-Key", "X-IRI-Facility-Project"})
"""Names in a refusal's `invalid_params` that are the request's headers, not the spec's
fields (the others are named below the spec's index: `[3].attributes.account`)."""
LONGEST_KEY = 240
"""The longest `Idempotency-Key` of a bulk launch: each spec's key is the request's with
`#<index>` appended, and must fit the store's 255 characters."""

BulkKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="Retry-safe key of the call, at most 240 characters: spec i is recorded "
        "with the key `<key>#<i>`, so the same call again answers the same jobs",
    ),
]


class InvalidParam(BaseModel):
    """One field at fault, as the IRI `Problem` names it."""

    name: str = Field(description="The field's JSON path below the list: `[3].resources`")
    reason: str = Field(description="Why it was refused, and what is offered instead")


class LaunchProblem(BaseModel):
    """A spec refused, as an RFC 9457 problem (the `Problem` of every error answer, with the
    same extension members: a 429 names its `limit`, `limit_value`, `used`, `retry_after`)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(default="about:blank", description="The problem type")
    status: int = Field(description="The status a launchJob of this spec alone would get")
    title: str = Field(description="Short summary of the problem type")
    detail: str = Field(description="What is wrong with this spec, and what is offered")
    instance: str = Field(description="The URL of the request")
    index: int = Field(description="The spec's position in the request's list (from 0)")
    invalid_params: list[InvalidParam] | None = Field(
        default=None, description="Each field at fault, named below the spec's index"
    )


class LaunchResult(BaseModel):
    """One spec's result, in the request's order: its job, or why it was refused."""

    index: int = Field(description="The spec's position in the request's list (from 0)")
    status: int = Field(
        description="201 the job was made now; 200 an earlier call with the same "
        "Idempotency-Key made it (a replay: nothing new); 4xx or 5xx the spec was refused "
        "(the problem's status: 400, 403, 422, 429, 502, 503 as launchJob would answer it)"
    )
    job: Job | None = Field(
        default=None,
        description="The job as launchJob answers it (with its spec); also beside the "
        "problem of a spec the scheduler refused (the job, `failed`, with its words)",
    )
    problem: LaunchProblem | None = Field(default=None, description="Why it was refused")


_RESPONSES: dict[int | str, dict[str, Any]] = {
    413: {
        "description": "Content Too Large: the body passes `max_request_bytes`, or the list "
        "holds more than `bulk_max_specs` JobSpecs (the detail names the bound: split the "
        "list); nothing was launched"
    },
    422: {
        "description": "Unprocessable Entity: the body is not a JSON list (a spec that is "
        "not valid is refused at its index in a 200 answer, never here), or a query "
        "parameter the operation does not define"
    },
}


@router.post(
    "/jobs/{resource_id}",
    operation_id="launchJobs",
    response_model=list[LaunchResult],
    response_model_exclude_none=True,
    summary="Submit Jobs in bulk (extension)",
    responses=_RESPONSES,
    response_description="One result per spec, in the request's order",
    openapi_extra={
        "requestBody": {
            "content": {
                "application/json": {
                    "schema": {
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/JobSpec"},
                    }
                }
            }
        },
        "x-iri-gateway-bulk": {
            "bound": "bulk_max_specs",
            "idempotency": "each spec's key is the Idempotency-Key with #<index> appended",
        },
    },
)
def launch_jobs(
    resource_id: KnownResource,
    specs: Annotated[
        Any, Body(description="The JobSpecs, at most `bulk_max_specs` (setting; default 1000)")
    ],
    request: Request,
    engine: EngineDep,
    principal: PrincipalDep,
    settings: SettingsDep,
    idempotency_key: BulkKey = None,
    project: ProjectHeader = None,
) -> Response:
    """Extension: launch each JobSpec of the list as its own job, as launchJob launches one;
    one result per spec, in order, an invalid spec refused at its index without failing the
    others.

    With an `Idempotency-Key`, spec `i` carries the key `<key>#<i>`: a retry of the whole
    call answers each job it made (status 200) and makes none twice, also when two calls
    race. Every spec that makes a new job counts as a launch against the caller's write
    rate (the call itself as the first) and `active_jobs_per_user`, in index order: those
    past either are refused with 429 at their index. The jobs accepted are recorded in one
    transaction and sent by the submitter in parallel, at most `submit_concurrency` of the
    call at a time; the answer waits up to `response_wait` seconds in all for their first
    attempts (past it a job is answered `new`, and is sent all the same).
    """
    if not isinstance(specs, list):
        raise ApiProblem(
            422,
            "Unprocessable Entity",
            f"the body of a bulk launch is a JSON list of JobSpecs, not {_kind(specs)}; "
            "one job alone is launched with launchJob (POST /api/v2/compute/job/{resource})",
            [{"name": "(document)", "reason": "a JSON list of JobSpecs is expected"}],
        )
    bound = settings.bulk_max_specs
    if len(specs) > bound:
        raise ApiProblem(
            413,
            "Content Too Large",
            f"{len(specs)} JobSpecs in one bulk launch; this gateway takes at most {bound} "
            "(its setting bulk_max_specs): send them in calls of at most that many, with an "
            "Idempotency-Key each",
            [{"name": "(body)", "reason": f"at most {bound} JobSpecs, not {len(specs)}"}],
        )
    if idempotency_key is not None and len(idempotency_key) > LONGEST_KEY:
        raise ApiProblem(
            400,
            "Bad Request",
            f"the Idempotency-Key of a bulk launch has at most {LONGEST_KEY} characters "
            f"(each spec's key is it with #<index> appended), not {len(idempotency_key)}",
            [{"name": "Idempotency-Key", "reason": f"at most {LONGEST_KEY} characters"}],
        )
    refused: dict[int, ApiProblem] = {}
    accepted: list[tuple[int, JobSpec]] = []
    granted = projects_on(engine, principal, resource_id)
    for index, element in enumerate(specs):
        try:
            spec = JobSpec.model_validate(element)
        except ValidationError as invalid:
            params = validation_params(invalid.errors(), (index,))
            said = "; ".join(f"{p['name']}: {p['reason']}" for p in params[:5])
            more = f" (and {len(params) - 5} more)" if len(params) > 5 else ""
            detail = f"the JobSpec at index {index} is not valid: {said}{more}"
            refused[index] = ApiProblem(422, "Unprocessable Entity", detail, params)
            continue
        try:
            effective = _with_account(spec, project, principal, granted)
        except ApiProblem as problem:
            refused[index] = problem
            continue
        accepted.append((index, effective))
    outcomes = engine.submit_many(
        owner=principal.user,
        resource_id=resource_id,
        specs=accepted,
        idempotency_key=idempotency_key,
        wait=settings.response_wait,
        quota=launch_quota(engine, settings, resource_id),
        admit=_admission(request, principal),
        claims=principal.claims,
    )
    by_index = {outcome.index: outcome for outcome in outcomes}
    origin = engine.proxy.settings.url
    instance = str(request.url)
    results = [
        _refused(index, refused[index], instance)
        if index in refused
        else _result(by_index[index], instance, origin)
        for index in range(len(specs))
    ]
    return Response(content=json_bytes(results), media_type="application/json")


def _kind(value: Any) -> str:
    """A JSON value's kind, as a person names it."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null" if value is None else type(value).__name__


def _admission(request: Request, principal: Principal) -> Callable[[], None]:
    """Count each spec that makes a new job as one write of the caller's, as a launchJob
    call counts; the call's own count (every request's) stands for the first."""
    first = [True]

    def admit() -> None:
        if first:
            first.clear()
            return
        charge_request(request, principal)

    return admit


def _result(outcome: BulkOutcome, instance: str, origin: str | None) -> dict[str, Any]:
    """A spec the engine took: its job (201 made now, 200 replayed), or its refusal."""
    job = (
        job_document(outcome.record, include_spec=True, ports_origin=origin)
        if outcome.record is not None
        else None
    )
    if outcome.error is not None:
        result = _refused(outcome.index, as_problem(outcome.error), instance)
        if job is not None:
            result["job"] = job
        return result
    return {"index": outcome.index, "status": 200 if outcome.replayed else 201, "job": job}


def _refused(index: int, refusal: ApiProblem, instance: str) -> dict[str, Any]:
    """A refused spec's result: the problem launchJob would answer, with its index, fields
    named below it, and a `Retry-After` as the `retry_after` member."""
    problem: dict[str, Any] = {
        "type": "about:blank",
        "status": refusal.status,
        "title": refusal.title,
        "detail": refusal.detail,
        "instance": instance,
        "index": index,
    }
    if refusal.invalid_params:
        problem["invalid_params"] = _below(index, refusal.invalid_params)
    for name, value in refusal.members.items():
        problem.setdefault(name, value)
    retry_after = (refusal.headers or {}).get("Retry-After")
    if retry_after is not None and retry_after.isdigit():
        problem.setdefault("retry_after", int(retry_after))
    return {"index": index, "status": refusal.status, "problem": problem}


def _below(index: int, params: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """`invalid_params` of spec `index`: its fields named below it, headers as they are."""
    named = []
    for param in params:
        name = param.get("name", "")
        if name not in HEADERS and not name.startswith("["):
            name = f"[{index}].{name}" if name else f"[{index}]"
        named.append({"name": name, "reason": param.get("reason", "")})
    return named


def document_bound(document: dict[str, Any], bound: int) -> None:
    """State the served bound (`bulk_max_specs`) as the request body's `maxItems`."""
    operation = document["paths"]["/api/v2/compute/jobs/{resource_id}"]["post"]
    operation["requestBody"]["content"]["application/json"]["schema"]["maxItems"] = bound
