"""Response bodies of the official IRI v2 schemas the compute API returns (Job, JobStatus)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from iri_gateway.models.job import JobState
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.service.operations.store import JobRecord


class JobStatus(BaseModel):
    """Official `JobStatus`."""

    model_config = ConfigDict(extra="allow")

    state: JobState = Field(description="Current state of the job")
    time: float | None = Field(default=None, description="Seconds since epoch of the status")
    message: str | None = Field(default=None, description="Human-readable status message")
    exit_code: int | None = Field(default=None, description="Process exit code if finished")
    meta_data: dict[str, Any] | None = Field(
        default=None, description="Backend-specific metadata: native id, history"
    )


class Job(BaseModel):
    """Official `Job`."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(description="Unique identifier of the job")
    status: JobStatus | None = Field(default=None, description="Current status of the job")
    job_spec: JobSpec | None = Field(default=None, description="Specification used")
    attributes: dict[str, Any] | None = Field(default=None, description="Type-specific data")


def job_view(record: JobRecord, *, include_spec: bool = True) -> Job:
    """The official Job for a stored record."""
    plan, paths = record.plan_model, record.paths
    status = JobStatus(
        state=record.state,
        time=record.updated_at,
        message=record.message,
        exit_code=record.exit_code,
        meta_data={
            "native_id": record.native_id,
            "resource_id": record.resource_id,
            "history": record.history,
            # Where the job runs and writes, as the gateway filled them in.
            "directory": paths.directory,
            "stdout_path": paths.stdout_path,
            "stderr_path": paths.stderr_path,
            # A cluster job's members, once its script has listed them.
            **({"members": record.members} if record.members else {}),
        },
    )
    spec = record.spec_model if include_spec else None
    return Job(
        id=record.id,
        status=status,
        job_spec=spec,
        attributes={
            "runtime": plan.runtime,
            "queue": plan.queue,
            "image": plan.image,
            "app": plan.app.model_dump(mode="json") if plan.app else None,
            "flavour": plan.flavour,
            "flavours": [asdict(outcome) for outcome in plan.flavours],
        },
    )
