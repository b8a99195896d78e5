"""The job views answered from stored JSON (`job_document`, `job_answer`) are the very JSON the
typed view (`job_view(...).model_dump(mode="json", exclude_none=True)`) gives, for every kind
of job: absent stays absent and null stays null.

The records are real: planned on the shipped profiles (a plain job, a GPU+MPI container job,
a job with image flavours and an app, a cluster job with members), stored, then read back
both from the record cache (decoded documents) and from the database (JSON text, decoded on
use), with and without the spec, before and after a state change with an exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.api.compute.models import (
    VIEW_PATH_FIELDS,
    VIEW_PLAN_FIELDS,
    job_answer,
    job_document,
    job_view,
)
from iri_gateway.models.job import JobState
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.models.plan import Plan
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.planner import make_plan
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.service.operations.store import JobRecord, JobStore, StateChange
from tests.conftest import TEST_PROFILE

REGISTRY = ProfileRegistry.from_files([*ProfileRegistry.builtin_files(), TEST_PROFILE])

FLAVOURS = [
    {
        "name": "cuda",
        "image": "docker.io/lab/app:cuda",
        "priority": 100,
        "requirements": [{"gpu_count": ">= 2"}, {"nvidia_cuda": "> 11"}],
    },
    {
        "name": "rocm",
        "image": "docker.io/lab/app:rocm",
        "priority": 50,
        "requirements": {"rocm": "exists"},
    },
    {"name": "bare", "image": "docker.io/lab/app:cpu", "priority": 1},
]

JOBS: dict[str, tuple[str, dict[str, Any]]] = {
    "plain": ("local", {"executable": "/bin/true"}),
    "named folder and outputs": (
        "local",
        {
            "executable": "/bin/echo",
            "arguments": ["a b", "ü"],
            "name": "named",
            "directory": "/tmp/somewhere",
            "stdout_path": "out.txt",
            "environment": {"A": "1"},
            "attributes": {"duration": 60, "account": "proj1"},
        },
    ),
    "gpu mpi container": (
        "perlmutter-gpu",
        {
            "executable": "/app/run",
            "launcher": "srun",
            "resources": {"node_count": 2, "processes_per_node": 4, "gpu_cores_per_process": 1},
            "container": {
                "image": "docker.io/lab/app:1",
                "volume_mounts": [{"source": "/global/cfs", "target": "/data", "read_only": True}],
            },
            "attributes": {"duration": 600, "queue_name": "regular"},
        },
    ),
    "flavours and app": (
        "perlmutter-gpu",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", "echo hi"],
            "container": {"flavours": FLAVOURS, "app": {"name": "segmentor", "version": "0.4.3"}},
        },
    ),
    "cluster": (
        "perlmutter-gpu",
        {
            "executable": "/app/serve",
            "container": {"image": "docker.io/lab/spark:3.5"},
            "roles": [
                {"name": "master", "count": 1},
                {"name": "worker", "count": 2, "environment": {"ROLE": "w"}},
            ],
        },
    ),
}

MEMBERS = [
    {
        "name": "master1",
        "role": "master",
        "index": 1,
        "node": "n1",
        "state": "active",
        "exit_code": None,
    },
    {
        "name": "worker1",
        "role": "worker",
        "index": 1,
        "node": None,
        "state": "new",
        "exit_code": None,
    },
]


def _stored(store: JobStore, resource_id: str, document: dict[str, Any]) -> str:
    spec = parse_jobspec(document)
    plan = make_plan(spec, REGISTRY.get(resource_id), REGISTRY.known_facts)
    record = store.create(
        owner="alice",
        resource_id=resource_id,
        spec=spec.model_dump(mode="json", exclude_unset=True),
        effective_spec=spec.model_dump(mode="json", exclude_unset=True),
        plan=plan.model_dump(mode="json", exclude={"script"}),
        script=plan.script,
    )
    return record.id


def _old(record: JobRecord, include_spec: bool) -> dict[str, Any]:
    dumped: dict[str, Any] = job_view(record, include_spec=include_spec).model_dump(
        mode="json", exclude_none=True
    )
    return dumped


def _both_ways(store: JobStore, url: str, job_id: str) -> list[JobRecord]:
    """The record from the cache and read afresh from the database."""
    cached = store.get(job_id)
    fresh = JobStore(url, cache_records=0).get(job_id)
    assert cached is not None and fresh is not None
    return [cached, fresh]


@pytest.mark.parametrize("kind", list(JOBS))
def test_the_fast_view_is_the_typed_views_json(kind: str, database_url: str) -> None:
    store = JobStore(database_url)
    resource_id, document = JOBS[kind]
    job_id = _stored(store, resource_id, document)
    changes = [
        None,
        StateChange(job_id, JobState.FAILED, "it ended", 3, members=MEMBERS),
    ]
    for change in changes:
        if change is not None:
            store.transition_many([change])
        for record in _both_ways(store, database_url, job_id):
            for include_spec in (False, True):
                expected = _old(record, include_spec)
                assert job_document(record, include_spec=include_spec) == expected
                answer = job_answer(record, include_spec=include_spec)
                assert json.loads(answer.body) == expected
    many = store.find(owner="alice")
    answer = job_answer(many, include_spec=True)
    assert json.loads(answer.body) == [_old(r, True) for r in many]


def test_absent_optional_fields_stay_absent_and_nulls_stay_null(tmp_path: Path) -> None:
    """A job without message or exit code: `message`, `exit_code`, `job_spec` are left out
    (the typed view's exclude_none), while the meta data's nulls (`native_id`) and the
    attributes' (`app`, `flavour`) are kept as null."""
    store = JobStore(f"sqlite:///{tmp_path}/jobs.db")
    job_id = _stored(store, *JOBS["plain"])
    record = store.get(job_id)
    assert record is not None
    record = JobRecord(**{**record.__dict__, "message": None})
    document = job_document(record, include_spec=False)
    assert "message" not in document["status"] and "exit_code" not in document["status"]
    assert "job_spec" not in document
    assert document["status"]["meta_data"]["native_id"] is None
    assert document["attributes"]["app"] is None and document["attributes"]["flavour"] is None
    assert document == _old(record, False)


def test_the_fields_the_fast_view_reads_are_plans_and_jobspecs() -> None:
    """`job_document` reads these fields of the stored plan and effective spec by name,
    without validating them: a field of `Plan` or `JobSpec` renamed must fail here."""
    assert set(VIEW_PLAN_FIELDS) <= set(Plan.model_fields)
    assert set(VIEW_PATH_FIELDS) <= set(JobSpec.model_fields)
    required = {name for name, field in Plan.model_fields.items() if field.is_required()}
    assert {"runtime", "queue", "image"} <= required  # read with [], never defaulted


def test_a_stored_plan_without_a_required_field_fails_loudly(tmp_path: Path) -> None:
    store = JobStore(f"sqlite:///{tmp_path}/jobs.db")
    job_id = _stored(store, *JOBS["plain"])
    record = store.get(job_id)
    assert record is not None
    plan = {k: v for k, v in record.plan.items() if k != "runtime"}
    store_record = JobRecord(
        **{**record.__dict__, "stored": type(record.stored)({**_docs(record), "plan": plan})}
    )
    with pytest.raises(KeyError):
        job_document(store_record, include_spec=False)


def _docs(record: JobRecord) -> dict[str, Any]:
    return {
        "spec": record.spec,
        "effective_spec": record.effective_spec,
        "plan": record.plan,
        "history": record.history,
        "members": record.members,
    }
