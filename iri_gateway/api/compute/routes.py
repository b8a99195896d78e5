"""Compute: the official job operations, and the capability, plan and placement extensions.

Views are thin: they resolve the caller and the project, then call the engine.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from iri_gateway.api.compute.documents import JobDocuments
from iri_gateway.api.compute.models import Job, job_answer
from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import EngineDep, KnownResource, PrincipalDep, SettingsDep
from iri_gateway.api.plumbing.official import StrictBool
from iri_gateway.api.plumbing.problems import ApiProblem
from iri_gateway.api.plumbing.projects import projects_on, refusal_hint
from iri_gateway.api.plumbing.rate_limit import check_launch_quota
from iri_gateway.models.job import JobState
from iri_gateway.models.jobspec import JobAttributes, JobSpec
from iri_gateway.models.placement import Placement
from iri_gateway.models.plan import Plan
from iri_gateway.models.project_rules import ResourceProjects
from iri_gateway.profiles.capabilities import Capabilities, capabilities
from iri_gateway.schedulers.batch import JobChanges
from iri_gateway.service.accounts.auth import Principal
from iri_gateway.service.jobs.engine import Engine, JobNotFoundError
from iri_gateway.service.operations.store import JobRecord

router = APIRouter(prefix="/api/v2/compute", tags=["compute"], route_class=CallerFirstRoute)
extensions = APIRouter(prefix="/api/v2/compute", tags=["extensions"], route_class=CallerFirstRoute)


async def _documents(request: Request) -> JobDocuments:
    documents: JobDocuments = request.app.state.job_documents
    return documents


DocumentsDep = Annotated[JobDocuments, Depends(_documents)]
"""The process's encoded status documents (`documents`), for the status reads."""

IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key")]
ProjectHeader = Annotated[
    str | None,
    Header(
        alias="X-IRI-Facility-Project",
        description="Trusted forwarded project; give the account here or in the spec",
    ),
]


def _with_account(
    spec: JobSpec, header: str | None, principal: Principal, granted: ResourceProjects
) -> JobSpec:
    """The effective account comes from exactly one place, the spec or the header, and must
    be a project the caller may charge on the resource (`granted`: its token's, and those
    the resource's project rules grant; 403 otherwise, saying how one is granted)."""
    in_spec = spec.attributes.account if spec.attributes else None
    if in_spec and header:
        raise ApiProblem(
            400,
            "Bad Request",
            "give the project either in attributes.account or in X-IRI-Facility-Project, not both",
            [{"name": "attributes.account", "reason": "also given as header"}],
        )
    account = in_spec or header
    if not account:
        raise ApiProblem(
            400,
            "Bad Request",
            "no project: set attributes.account or the X-IRI-Facility-Project header",
            [{"name": "attributes.account", "reason": "required"}],
        )
    if not granted.may_charge(account):
        field = "attributes.account" if in_spec else "X-IRI-Facility-Project"
        raise ApiProblem(
            403,
            "Forbidden",
            f"user {principal.user!r} may not charge project {account!r} on "
            f"{granted.resource!r} ({refusal_hint(principal, granted)})",
            [{"name": field, "reason": f"project {account!r} is not granted"}],
        )
    if in_spec:
        return spec
    attributes = (spec.attributes or JobAttributes()).model_copy(update={"account": account})
    return spec.model_copy(update={"attributes": attributes})


def _owned(engine: Engine, principal: Principal, resource_id: str, job_id: str) -> JobRecord:
    record = engine.get(owner=principal.user, job_id=job_id)
    if record.resource_id != resource_id:
        raise JobNotFoundError(f"no job {job_id!r} on {resource_id!r}")
    return record


@router.post(
    "/job/{resource_id}",
    operation_id="launchJob",
    response_model=Job,
    response_model_exclude_none=True,
    summary="Submit Job",
)
def launch_job(
    resource_id: KnownResource,
    spec: JobSpec,
    engine: EngineDep,
    principal: PrincipalDep,
    settings: SettingsDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
    project: ProjectHeader = None,
) -> Response:
    """Submit a job; with an `Idempotency-Key`, a retry returns the first job.

    The job is recorded, then sent to the scheduler off the request; the answer waits up to
    `response_wait` seconds (default 2) for the scheduler: `queued` with the native id, or
    the scheduler's refusal. Past the wait, or while the scheduler is unavailable, the job
    is returned `new`, its message saying what is being done; it is sent when it can be.
    A retry with the same key, even while the first request is still waiting, returns the
    same job.
    """
    granted = projects_on(engine, principal, resource_id)
    effective = _with_account(spec, project, principal, granted)
    check_launch_quota(engine, settings, principal, resource_id, idempotency_key)
    engine.webhooks.check_notify(principal.user, spec.notify)
    submission = engine.submit(
        owner=principal.user,
        resource_id=resource_id,
        spec=effective,
        idempotency_key=idempotency_key,
        wait=settings.response_wait,
        claims=principal.claims,
    )
    if idempotency_key is not None:
        response.headers["Idempotency-Key-Reply"] = "hit" if submission.replayed else "miss"
    return job_answer(submission.record, response=response, ports_origin=engine.proxy.settings.url)


@router.put(
    "/job/{resource_id}/{job_id}",
    operation_id="updateJob",
    response_model=Job,
    response_model_exclude_none=True,
    summary="Update Job",
)
def update_job(
    resource_id: KnownResource,
    job_id: str,
    spec: JobSpec,
    engine: EngineDep,
    principal: PrincipalDep,
    settings: SettingsDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
    project: ProjectHeader = None,
) -> Response:
    """Change a queued job: duration, queue, name or account.

    Waits up to `response_wait` seconds for the scheduler; past it the job is returned with
    the message "update being sent to the scheduler", and later says how it went. With an
    `Idempotency-Key`, a retry (same key, same body) returns the job without changing it
    again; the same key with another body is a 422 naming the header."""
    _owned(engine, principal, resource_id, job_id)
    granted = projects_on(engine, principal, resource_id)
    effective = _with_account(spec, project, principal, granted)
    attributes = effective.attributes or JobAttributes()
    changes = JobChanges(
        duration=attributes.duration,
        queue_name=attributes.queue_name,
        name=effective.name,
        account=attributes.account,
    )
    update = engine.update(
        owner=principal.user,
        job_id=job_id,
        changes=changes,
        wait=settings.response_wait,
        idempotency_key=idempotency_key,
        request=spec.model_dump(mode="json", exclude_unset=True),
    )
    if idempotency_key is not None:
        response.headers["Idempotency-Key-Reply"] = "hit" if update.replayed else "miss"
    return job_answer(update.record, response=response, ports_origin=engine.proxy.settings.url)


@router.get(
    "/status/{resource_id}/{job_id}",
    operation_id="getJob",
    response_model=Job,
    response_model_exclude_none=True,
    summary="Get Job Status",
)
async def get_job(
    resource_id: str,
    job_id: str,
    engine: EngineDep,
    principal: PrincipalDep,
    documents: DocumentsDep,
    historical: StrictBool | None = True,
    include_spec: StrictBool | None = False,
) -> Response:
    """A job's status, from the store (the poller keeps it current).

    A job the store holds in memory (SQLite) is answered on the event loop; any other read
    is a database query (always on PostgreSQL: no record cache across replicas), run on the
    thread pool so that a slow database does not stop the loop's other requests.
    """
    record = engine.known(owner=principal.user, job_id=job_id)
    if record is None or record.resource_id != resource_id:
        record = await run_in_threadpool(_owned, engine, principal, resource_id, job_id)
    return job_answer(
        record,
        include_spec=bool(include_spec),
        documents=documents,
        ports_origin=engine.proxy.settings.url,
    )


@router.post(
    "/status/{resource_id}",
    operation_id="getJobs",
    response_model=list[Job],
    response_model_exclude_none=True,
    summary="Get Jobs",
)
def get_jobs(
    resource_id: str,
    engine: EngineDep,
    principal: PrincipalDep,
    documents: DocumentsDep,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=0, le=1000)] = 100,
    historical: StrictBool | None = False,
    include_spec: StrictBool | None = False,
    filters: Annotated[dict[str, Any] | None, Body()] = None,
) -> Response:
    """The caller's jobs on a resource; finished ones only with `historical`."""
    states = None if historical else [s for s in JobState if not s.final]
    wanted = (filters or {}).get("state")
    if isinstance(wanted, str):
        states = [JobState(wanted)] if wanted in JobState._value2member_map_ else []
    name = (filters or {}).get("name")
    records = engine.jobs(
        owner=principal.user,
        resource_id=resource_id,
        states=states,
        name=name if isinstance(name, str) else None,
        offset=offset,
        limit=limit,
    )
    return job_answer(
        records,
        include_spec=bool(include_spec),
        documents=documents,
        ports_origin=engine.proxy.settings.url,
    )


@router.delete(
    "/cancel/{resource_id}/{job_id}",
    operation_id="cancelJob",
    status_code=204,
    summary="Cancel Job",
)
def cancel_job(
    resource_id: str,
    job_id: str,
    engine: EngineDep,
    principal: PrincipalDep,
    settings: SettingsDep,
) -> Response:
    """Ask for the job to be cancelled; its state turns `canceled` when the scheduler says so.

    The cancel is recorded, then sent off the request; the answer waits up to
    `response_wait` seconds for the scheduler (its refusal is 409). A cancel the scheduler
    cannot be told now (an outage) is still accepted: it is sent when the scheduler is
    back, and the job's message says so meanwhile."""
    _owned(engine, principal, resource_id, job_id)
    engine.cancel(owner=principal.user, job_id=job_id, wait=settings.response_wait)
    return Response(status_code=204)


_RESTART_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: {"description": "Not Found: no such job of the caller on this resource"},
    409: {
        "description": "Conflict: the job has not reached the scheduler yet, or the "
        "scheduler refused to run it again (its words in `detail`: e.g. a job Slurm no "
        "longer holds, a finished PBS job)"
    },
    503: {
        "description": "Service Unavailable: the scheduler cannot be reached now; try "
        "again after `Retry-After`"
    },
}


@router.post(
    "/restart/{resource_id}/{job_id}",
    operation_id="restartJob",
    response_model=Job,
    tags=["extensions"],
    response_model_exclude_none=True,
    summary="Restart Job (extension)",
    responses=_RESTART_RESPONSES,
    response_description="The job, back in `queued`; its history keeps the earlier "
    "run and the restart",
)
def restart_job(
    resource_id: str,
    job_id: str,
    engine: EngineDep,
    principal: PrincipalDep,
    settings: SettingsDep,
) -> Response:
    """Extension: run the job again as the same gateway job, every member of a cluster job
    with it. Slurm `scontrol requeue`, PBS `qrerun` (running jobs only), the local
    scheduler's own restart; a running job is stopped first. Waits up to `response_wait`
    seconds for the scheduler; past it the job is returned with the message "restart being
    sent to the scheduler"."""
    _owned(engine, principal, resource_id, job_id)
    record = engine.restart(owner=principal.user, job_id=job_id, wait=settings.response_wait)
    return job_answer(record, ports_origin=engine.proxy.settings.url)


@extensions.get(
    "/capabilities/{resource_id}",
    operation_id="getComputeCapabilities",
    response_model=Capabilities,
    summary="Capabilities of a resource",
)
def get_capabilities(
    resource_id: str, engine: EngineDep, principal: PrincipalDep, settings: SettingsDep
) -> Capabilities:
    """Runtimes, GPU and MPI bindings, mount policy, extra options, hardware facts, limits."""
    return capabilities(
        engine.resource(resource_id=resource_id), max_request_bytes=settings.max_request_bytes
    )


@extensions.post(
    "/plan/{resource_id}", operation_id="planJob", response_model=Plan, summary="Dry run"
)
def plan_job(
    resource_id: KnownResource, spec: JobSpec, engine: EngineDep, principal: PrincipalDep
) -> Plan:
    """How the job would run, and the exact batch script; 422 lists every problem.

    Refuses what submission by the caller would refuse, a `directory` outside the folders
    the caller may use included.
    """
    return engine.plan(
        owner=principal.user, resource_id=resource_id, spec=spec, claims=principal.claims
    )


@extensions.post(
    "/placement",
    operation_id="placeJob",
    response_model=list[Placement],
    summary="Where can this run?",
)
def place_job(spec: JobSpec, engine: EngineDep, principal: PrincipalDep) -> list[Placement]:
    """Every resource ranked: runnable first, best flavour first, with reasons for the rest."""
    return engine.place(spec=spec, owner=principal.user)
