"""Liveness and readiness for load balancers and orchestrators (no token, outside the IRI
API): `GET /health` answers while the process serves HTTP; `GET /ready` says whether this
replica should get requests (see `iri_gateway.service.health`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import EngineDep
from iri_gateway.service.health import readiness

router = APIRouter(tags=["operations", "extensions"], route_class=CallerFirstRoute)


class Liveness(BaseModel):
    status: str = Field(description="Always `alive`: the process serves HTTP")


class ReadinessReport(BaseModel):
    status: str = Field(
        description="`ready`; `draining` when the replica was told to stop (SIGTERM) and "
        "takes no new requests, or `not ready` (both answered with 503)"
    )
    problems: list[str] = Field(description="What keeps the replica from being ready")
    details: dict[str, Any] = Field(
        description="This replica (id, host, pid), its heartbeat's age, the resources it "
        "polls, the age of its last poll cycle and the poll errors by resource, the "
        "submissions waiting to be tried again, and each resource's health probes "
        "(`resource_health`: status and each probe's ok, words, time and duration)"
    )


@router.get(
    "/health",
    response_model=Liveness,
    operation_id="getLiveness",
    summary="Liveness: the process answers",
)
async def get_liveness() -> Liveness:
    return Liveness(status="alive")


@router.get(
    "/ready",
    response_model=ReadinessReport,
    operation_id="getReadiness",
    summary="Readiness: this replica can take requests",
    responses={
        503: {
            "model": ReadinessReport,
            "description": "Not ready, or draining after SIGTERM: `problems` says why",
        }
    },
)
def get_readiness(request: Request, engine: EngineDep) -> JSONResponse:
    report = readiness(
        engine,
        getattr(request.app.state, "poller", None),
        started=getattr(request.app.state, "started", False),
        draining=request.app.state.drain.draining,
    )
    body = ReadinessReport(
        status="ready" if report.ready else "draining" if report.draining else "not ready",
        problems=report.problems,
        details=report.details,
    )
    return JSONResponse(body.model_dump(mode="json"), status_code=200 if report.ready else 503)
