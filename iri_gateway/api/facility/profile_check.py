"""Facility extension: `POST /facility/profile-check`, `iri-gateway profile check` for a text.

Only facility admins may call it (403 for anybody else, before the body is read): the console's
Profiles page sends the YAML an admin pasted or picked; the answer is what the
command line would say of that file: its issues (file:line: field: reason) as a 422 problem
with an `errors` member, or the check matrix (sample jobs x runtimes, each script through
`bash -n` and shellcheck). Nothing is stored and no path is opened: the text is parsed in
memory (`profiles.text_check`).

Cost is bounded three ways: the text's length (`MAX_PROFILE_CHARS`, a 413 beyond, on top of the
server's `max_request_bytes`), the matrix's size (`text_check.MAX_CELLS`, a 422 naming the
count), and how many checks run at once in this process (`CONCURRENT_CHECKS`, a 429 with
Retry-After beyond), since each check renders and lints up to `MAX_CELLS` scripts.
"""

from __future__ import annotations

import threading
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Request
from pydantic import BaseModel, ConfigDict, Field

from iri_gateway.api.facility.catalog import per_app
from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import ADMIN_ONLY, AdminDep
from iri_gateway.api.plumbing.problems import ApiProblem
from iri_gateway.errors import ProfileError
from iri_gateway.profiles.check import find_shellcheck
from iri_gateway.profiles.text_check import MAX_CELLS, check_text

router = APIRouter(prefix="/api/v2/facility", tags=["extensions"], route_class=CallerFirstRoute)

MAX_PROFILE_CHARS = 64 * 1024
"""Longest profile text checked: the largest shipped profile is under 5,000 characters."""
CONCURRENT_CHECKS = 2
"""Checks one gateway process runs at once (each one renders and lints many scripts)."""
LABEL = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


class ProfileCheckRequest(BaseModel):
    """A profile to check: its YAML text, and the name its issues are reported under."""

    model_config = ConfigDict(extra="forbid")

    profile: str = Field(
        description="The profile's YAML text, as in a facility_profiles/*.yaml file. Longer "
        f"than {MAX_PROFILE_CHARS} characters is refused with 413.",
        json_schema_extra={"maxLength": MAX_PROFILE_CHARS},
    )
    name: str = Field(
        default="profile.yaml",
        pattern=LABEL,
        description="The name issues are reported under (file:line), e.g. the uploaded file's "
        "name; only a label: nothing is read from or written to it.",
    )


class ProfileCheckCell(BaseModel):
    """One sample job on one resource and runtime ("none": bare execution)."""

    resource: str
    runtime: str
    sample: Literal["cpu", "gpu", "mpi", "gpu+mpi"]
    outcome: Literal["ok", "unsupported", "FAIL"] = Field(
        description="ok: rendered and linted clean; unsupported: the resource cannot run this "
        "kind of job (no GPUs, no MPI binding), not a fault; FAIL: a fault of the profile"
    )
    detail: str = Field(description="Why it is unsupported or failed; empty when ok")


class ProfileCheckReport(BaseModel):
    """The check matrix of a profile that loads, as `iri-gateway profile check` shows it."""

    name: str
    resources: int = Field(description="Resources the profile defines")
    passed: bool = Field(description="No cell failed (`profile check` exits 0)")
    failed: int = Field(description="Cells whose outcome is FAIL")
    linted: str = Field(
        description="How scripts were checked: 'bash -n and shellcheck -S "
        "warning', or 'bash -n only' when this server has no shellcheck"
    )
    cells: list[ProfileCheckCell]


_ERRORS_SCHEMA = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["file", "line", "field", "reason", "message"],
        "properties": {
            "file": {"type": "string"},
            "line": {"type": ["integer", "null"]},
            "field": {"type": "string"},
            "reason": {"type": "string"},
            "message": {"type": "string", "description": "As `profile check` prints it"},
        },
    },
}
_PROBLEM = "application/problem+json"


@router.post(
    "/profile-check",
    operation_id="checkProfile",
    response_model=ProfileCheckReport,
    summary="Check a facility profile's text (extension)",
    responses={
        401: {"description": "No valid bearer token"},
        403: ADMIN_ONLY,
        413: {
            "description": f"The profile text is longer than {MAX_PROFILE_CHARS} "
            "characters, or the body passes the server's max_request_bytes"
        },
        422: {
            "description": "The profile does not load (not YAML, not valid text, a field "
            f"wrong) or its matrix passes {MAX_CELLS} cells; the `errors` member lists "
            "each issue with its line, as `iri-gateway profile check` prints it",
            "content": {
                _PROBLEM: {"schema": {"type": "object", "properties": {"errors": _ERRORS_SCHEMA}}}
            },
        },
        429: {
            "description": f"{CONCURRENT_CHECKS} checks are already running in this "
            "process; try again after Retry-After seconds"
        },
    },
)
def check_profile(
    request: Request, body: Annotated[ProfileCheckRequest, Body()], admin: AdminDep
) -> ProfileCheckReport:
    """Validate a profile and render its check matrix, storing nothing (facility admins
    only: it renders and lints up to `MAX_CELLS` scripts).

    The text is parsed in memory; each rendered script is linted in a private temporary
    folder removed afterwards."""
    if len(body.profile) > MAX_PROFILE_CHARS:
        raise ApiProblem(
            413,
            "Content Too Large",
            f"the profile is {len(body.profile)} characters, more than the "
            f"{MAX_PROFILE_CHARS} checked here",
            [{"name": "profile", "reason": f"at most {MAX_PROFILE_CHARS} characters"}],
        )
    slots: threading.BoundedSemaphore = per_app(
        request, "profile_check_slots", lambda: threading.BoundedSemaphore(CONCURRENT_CHECKS)
    )
    if not slots.acquire(blocking=False):
        raise ApiProblem(
            429,
            "Too Many Requests",
            f"{CONCURRENT_CHECKS} profile checks are running; try again shortly",
            headers={"Retry-After": "2"},
        )
    try:
        result = check_text(body.profile, body.name, find_shellcheck())
    except ProfileError as error:
        errors = [
            {
                "file": issue.file,
                "line": issue.line,
                "field": issue.field,
                "reason": issue.reason,
                "message": str(issue),
            }
            for issue in error.issues
        ]
        raise ApiProblem(
            422,
            "Unprocessable Entity",
            f"invalid profile:\n{error}",
            [{"name": issue.field or "profile", "reason": str(issue)} for issue in error.issues],
            members={"errors": errors},
        ) from None
    finally:
        slots.release()
    return ProfileCheckReport(
        name=body.name,
        resources=result.resources,
        passed=result.failed == 0,
        failed=result.failed,
        linted=result.linted,
        cells=[
            ProfileCheckCell(
                resource=row.resource,
                runtime=row.runtime,
                sample=row.sample,
                outcome=row.outcome,
                detail=row.detail,
            )
            for row in result.rows
        ],
    )
