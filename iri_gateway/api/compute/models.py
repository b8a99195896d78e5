"""Response bodies of the official IRI v2 schemas the compute API returns (Job, JobStatus)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import orjson
import pydantic_core
from fastapi import Response
from pydantic import BaseModel, ConfigDict, Field

from iri_gateway.api.compute.documents import JobDocuments
from iri_gateway.models.array_elements import ArrayElements
from iri_gateway.models.job import JobState
from iri_gateway.models.job_arrays import ArrayIndices
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.service.operations.store import JobRecord
from iri_gateway.service.proxy.service import port_url
from iri_gateway.service.proxy.targets import declared as declared_ports


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


def port_entries(record: JobRecord, origin: str | None) -> list[dict[str, Any]]:
    """A job's declared ports as meta_data `ports` lists them: member, name, number and,
    when the gateway has a port proxy (`origin`, its `proxy_url`), the port's URL there."""
    entries: list[dict[str, Any]] = []
    for port in declared_ports(record):
        entry: dict[str, Any] = {"member": port.member, "name": port.name, "port": port.port}
        if origin is not None:
            entry["url"] = port_url(origin, record.id, port.member, port.name)
        entries.append(entry)
    return entries


def array_entry(record: JobRecord) -> dict[str, Any] | None:
    """An array job's meta_data `array`: its indices as the scheduler's grammar writes them,
    how many elements, the throttle, and the elements counted by state (before the first
    poll, all in the job's own state: `new` or `queued`); None for any other job."""
    written = record.effective_spec.get("array")
    if not isinstance(written, dict):
        return None
    indices = ArrayIndices.parse(written["indices"])
    if record.elements:
        counts = ArrayElements.load(record.elements).counts()
    else:
        counts = {record.state.value: len(indices)}
    return {
        "indices": indices.text(),
        "count": len(indices),
        "max_concurrent": written.get("max_concurrent"),
        "counts": counts,
    }


def job_view(
    record: JobRecord, *, include_spec: bool = True, ports_origin: str | None = None
) -> Job:
    """The official Job for a stored record; `ports_origin` is the port proxy's origin."""
    ports = port_entries(record, ports_origin)
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
            # A job's service ports, and where the port proxy serves them.
            **({"ports": ports} if ports else {}),
            # An array job's indices and its elements counted by state.
            **({"array": array} if (array := array_entry(record)) else {}),
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


def job_document(
    record: JobRecord, *, include_spec: bool = True, ports_origin: str | None = None
) -> dict[str, Any]:
    """`job_view(record).model_dump(mode="json", exclude_none=True)`, built straight from the
    stored JSON: no model validated or dumped but the spec's, when it is shown (a test holds
    the two to each other over many kinds of job).

    The stored plan and effective spec were written by the gateway from its own models, so
    their fields are read, not validated again: a required field of `Plan` read by its name
    (a record without it fails loudly, KeyError), a field with a default of `Plan` read with
    that default. `VIEW_PLAN_FIELDS` and `VIEW_PATH_FIELDS` are the names read, which a test
    holds to `Plan`'s and `JobSpec`'s."""
    plan, effective = record.plan, record.effective_spec
    status: dict[str, Any] = {"state": record.state.value, "time": record.updated_at}
    if record.message is not None:
        status["message"] = record.message
    if record.exit_code is not None:
        status["exit_code"] = record.exit_code
    meta_data: dict[str, Any] = {
        "native_id": record.native_id,
        "resource_id": record.resource_id,
        "history": record.history,
        "directory": effective.get("directory"),
        "stdout_path": effective.get("stdout_path"),
        "stderr_path": effective.get("stderr_path"),
    }
    if record.members:
        meta_data["members"] = record.members
    ports = port_entries(record, ports_origin)
    if ports:
        meta_data["ports"] = ports
    array = array_entry(record)
    if array:
        meta_data["array"] = array
    status["meta_data"] = meta_data
    document: dict[str, Any] = {"id": record.id, "status": status}
    if include_spec:
        document["job_spec"] = record.spec_model.model_dump(mode="json", exclude_none=True)
    document["attributes"] = {
        "runtime": plan["runtime"],
        "queue": plan["queue"],
        "image": plan["image"],
        "app": plan.get("app"),
        "flavour": plan.get("flavour"),
        "flavours": plan.get("flavours", []),
    }
    return document


VIEW_PLAN_FIELDS = ("runtime", "queue", "image", "app", "flavour", "flavours")
"""The fields of a stored plan `job_document` reads (held to `Plan`'s by a test)."""
VIEW_PATH_FIELDS = ("directory", "stdout_path", "stderr_path")
"""The fields of a stored effective spec `job_document` reads (held to `JobSpec`'s)."""


def json_bytes(document: Any) -> bytes:
    """`document` as JSON, encoded once: orjson, or pydantic's encoder for what orjson
    refuses (an integer past 64 bits), as FastAPI's own answer would have encoded it."""
    try:
        return orjson.dumps(document)
    except orjson.JSONEncodeError:
        return pydantic_core.to_json(document)


def job_documents(ports_origin: str | None = None) -> JobDocuments:
    """A process's cache of encoded status documents (`documents`), encoding as
    `job_document` without the spec."""
    return JobDocuments(
        lambda record: json_bytes(
            job_document(record, include_spec=False, ports_origin=ports_origin)
        )
    )


def job_answer(
    records: JobRecord | Sequence[JobRecord],
    *,
    include_spec: bool = True,
    response: Response | None = None,
    documents: JobDocuments | None = None,
    ports_origin: str | None = None,
) -> Response:
    """The Job (or list of Jobs) answered as bytes, encoded once: FastAPI's `response_model`
    would validate and encode the models again. The headers set on `response` are kept.
    With `documents` and without the spec, a job's document encoded earlier from the same
    stored values is used again (compact JSON joined with commas is the list's encoding)."""
    if documents is not None and not include_spec:
        if isinstance(records, JobRecord):
            body = documents.encoded(records)
        else:
            body = b"[" + b",".join(documents.encoded(r) for r in records) + b"]"
    elif isinstance(records, JobRecord):
        body = json_bytes(
            job_document(records, include_spec=include_spec, ports_origin=ports_origin)
        )
    else:
        body = json_bytes(
            [job_document(r, include_spec=include_spec, ports_origin=ports_origin) for r in records]
        )
    answer = Response(content=body, media_type="application/json")
    for name, value in response.headers.items() if response else ():
        if name not in ("content-length", "content-type"):
            answer.headers[name] = value
    return answer
