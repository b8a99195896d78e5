"""`GET /api/v2/audit` (extension): the audit log, for facility admins only.

Newest first, one page at a time (`offset` and `limit`, as the job pages), filtered by user,
operation and a time range. A non-admin is refused (403) before anything is read, so the
records (whose targets name other users' jobs and paths) are never shown to one. There is
no route that changes or deletes a record (docs/operations.md, "Audit log").
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import AwareDatetime, BaseModel, Field

from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import ADMIN_ONLY, AdminDep
from iri_gateway.service.operations.audit import AuditFilters, AuditLog, AuditRecord, Outcome

router = APIRouter(prefix="/api/v2", tags=["extensions"], route_class=CallerFirstRoute)

MAX_PAGE = 200
"""The most records one page holds."""
MAX_OFFSET = 1_000_000
"""The deepest page start: further back, narrow the time range instead."""


class AuditRecordView(BaseModel):
    """One audit record: who did what to what, when, and how it ended."""

    id: int = Field(description="The record's number; later records have larger ones")
    time: datetime = Field(description="When it was recorded (UTC)")
    user: str = Field(description="Who called (for the operator's token commands: their login)")
    admin: bool = Field(description="The caller was a facility admin")
    operation: str = Field(
        description="The API's operationId (`launchJob`, `rm`, `putJobTemplate`, ...) or the "
        "operator's command (`createToken`, `revokeToken`)"
    )
    resource_id: str | None = Field(description="The resource the call named, if any")
    target: str | None = Field(
        description="What it acted on: `job ID`, `task ID`, `template NAME`, `path P`, "
        "`target_path P`, `user U` (a token's user; never the token), joined by `; `"
    )
    outcome: Outcome = Field(
        description="`succeeded` (status below 400), `refused` (4xx), `failed` (5xx)"
    )
    status: int | None = Field(description="The HTTP status answered (none for a command)")
    error: str | None = Field(description="The problem's title when it did not succeed")
    request_id: str | None = Field(description="The request's `X-Request-ID`")
    trace_id: str | None = Field(description="The request's trace id (tracing on)")


class AuditPageView(BaseModel):
    """One page of the audit log, newest first."""

    offset: int = Field(ge=0, description="The position of the page's first record (0: newest)")
    limit: int = Field(ge=1, le=MAX_PAGE, description="The most records the page could hold")
    more: bool = Field(description="Older records match too (ask with offset + limit)")
    records: list[AuditRecordView] = Field(description="The page's records, newest first")


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = 1e-6


def shown_time(at: float) -> datetime:
    """A record's time as shown: cut (not rounded) to the microsecond, so a record shown at T
    is at or after T, and `since=T` finds it (`until=T` does not)."""
    return EPOCH + timedelta(microseconds=math.floor(at * 1_000_000))


def _view(record: AuditRecord) -> AuditRecordView:
    entry = record.entry
    return AuditRecordView(
        id=record.id,
        time=shown_time(record.at),
        user=entry.user,
        admin=entry.admin,
        operation=entry.operation,
        resource_id=entry.resource_id,
        target=entry.target,
        outcome=entry.outcome,
        status=entry.status,
        error=entry.error,
        request_id=entry.request_id,
        trace_id=entry.trace_id,
    )


_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "No valid bearer token"},
    403: ADMIN_ONLY,
}


@router.get(
    "/audit",
    operation_id="getAudit",
    response_model=AuditPageView,
    responses=_RESPONSES,
    summary="The audit log (extension, facility admins)",
)
def get_audit(
    request: Request,
    admin: AdminDep,
    user: Annotated[
        str | None, Query(min_length=1, max_length=255, description="Only this user's records")
    ] = None,
    operation: Annotated[
        str | None,
        Query(min_length=1, max_length=64, description="Only this operation's records"),
    ] = None,
    since: Annotated[
        AwareDatetime | None,
        Query(description="Only records at or after this time (ISO 8601 with a time zone)"),
    ] = None,
    until: Annotated[
        AwareDatetime | None,
        Query(description="Only records before this time (ISO 8601 with a time zone)"),
    ] = None,
    offset: Annotated[
        int, Query(ge=0, le=MAX_OFFSET, description="Records to skip, newest first")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="The most records to return")] = 50,
) -> AuditPageView:
    """Extension: records of state-changing calls (and refused attempts), newest first;
    facility admins only (anybody else: 403)."""
    if since is not None and until is not None and until <= since:
        raise RequestValidationError(
            [
                {
                    "type": "value_error",
                    "loc": ("query", "until"),
                    "msg": "must be later than `since`",
                    "input": until.isoformat(),
                }
            ]
        )
    filters: AuditFilters = {}
    if user is not None:
        filters["user"] = user
    if operation is not None:
        filters["operation"] = operation
    if since is not None:
        # half a microsecond early: the float of a shown time may be a hair past the record's
        filters["since"] = since.timestamp() - MICROSECOND / 2
    if until is not None:
        filters["until"] = until.timestamp()
    audit: AuditLog = request.app.state.audit
    page = audit.page(offset=offset, limit=limit, **filters)
    return AuditPageView(
        offset=offset, limit=limit, more=page.more, records=[_view(r) for r in page.records]
    )
