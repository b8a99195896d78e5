"""Compute extension: a job's service ports, and links that open them through the port proxy.

`GET /compute/ports/{resource}/{job}` lists the job's declared ports with their URLs on the
proxy's origin; `POST /compute/ports/{resource}/{job}/{member}/{port}` makes a link for a
browser: a short-lived ticket on the proxy's origin that becomes a session cookie there, so
the gateway token never travels to the proxy's origin, let alone to the service. Another
user's job, an unknown member and an undeclared port are one 404.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import EngineDep, PrincipalDep
from iri_gateway.service.jobs.engine import Engine

router = APIRouter(prefix="/api/v2/compute", tags=["extensions"], route_class=CallerFirstRoute)

MemberName = Annotated[
    str,
    Path(
        description="The member: `main` for a job without roles, else a member's name (`worker2`)",
        min_length=1,
        max_length=64,
    ),
]
PortName = Annotated[
    str, Path(description="The port's name, as the job declared it", min_length=1, max_length=20)
]


class PortView(BaseModel):
    """One declared port of a job."""

    member: str = Field(description="`main` for a job without roles, else the member's name")
    name: str = Field(description="The port's name, as declared")
    port: int = Field(description="The port number the member listens on")
    url: str | None = Field(
        description="Where the port proxy serves it (null: this gateway has no port proxy); "
        "a browser opens it through a link (openJobPort), a script with its bearer token"
    )
    tunnel: str | None = Field(
        description="The WebSocket URL of a raw TCP tunnel to the port (null: no port "
        "proxy): each binary message carries the connection's bytes; the bearer token "
        "authenticates it (`iri-gateway jobs forward`)"
    )


class PortLink(BaseModel):
    """A link that opens one port in a browser."""

    url: str = Field(
        description="Open it in a browser before `expires_at`: it sets a session for this "
        "port on the proxy's origin and leads to the port's page"
    )
    expires_at: float = Field(description="When the link stops working, seconds since the epoch")


def _owned_ports(engine: Engine, owner: str, resource_id: str, job_id: str) -> list[PortView]:
    return [
        PortView(
            member=entry.member,
            name=entry.name,
            port=entry.port,
            url=entry.url,
            tunnel=entry.tunnel,
        )
        for entry in engine.proxy.ports(owner, resource_id, job_id)
    ]


@router.get(
    "/ports/{resource_id}/{job_id}",
    operation_id="listJobPorts",
    response_model=list[PortView],
    summary="List a job's service ports (extension)",
)
async def list_job_ports(
    resource_id: str, job_id: str, engine: EngineDep, principal: PrincipalDep
) -> list[PortView]:
    """The ports your job declared (`ports`, or its roles' `ports`, one entry per member),
    each with its URL through the port proxy."""
    return await run_in_threadpool(_owned_ports, engine, principal.user, resource_id, job_id)


def _link(
    engine: Engine, owner: str, resource_id: str, job_id: str, member: str, port: str
) -> PortLink:
    _owned_ports(engine, owner, resource_id, job_id)
    url, expires = engine.proxy.link(owner, job_id, member, port)
    return PortLink(url=url, expires_at=expires)


@router.post(
    "/ports/{resource_id}/{job_id}/{member}/{port}",
    operation_id="openJobPort",
    response_model=PortLink,
    status_code=201,
    summary="Open a job's service port in a browser (extension)",
    responses={
        409: {"description": "Conflict: the member does not run yet; try again when it runs"},
        410: {"description": "Gone: the job or the member has ended; its ports are closed"},
        501: {"description": "Not Implemented: this gateway has no port proxy (proxy_url)"},
    },
)
async def open_job_port(
    resource_id: str,
    job_id: str,
    member: MemberName,
    port: PortName,
    engine: EngineDep,
    principal: PrincipalDep,
) -> PortLink:
    """A link, valid for `proxy_link_ttl` seconds, that opens the port in a browser: on the
    proxy's own origin it becomes a session cookie for this port only (HttpOnly, SameSite),
    then leads to the port's page. Only while the member runs."""
    return await run_in_threadpool(_link, engine, principal.user, resource_id, job_id, member, port)
