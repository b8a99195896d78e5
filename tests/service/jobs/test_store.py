"""The job store, on SQLite and on a real PostgreSQL (`database_url`): a cluster job's members,
stored plans and paths read back typed, the record cache. Queries, transitions and races:
tests/service/jobs/test_store_queries.py; schema migrations:
tests/service/operations/test_migrations.py."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from iri_gateway.models.job import JobState
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.service.operations.store import JobPaths, JobStore, StateChange
from tests.conftest import stored_plan

WORKER = {
    "name": "worker1",
    "role": "worker",
    "index": 1,
    "node": "n2",
    "address": "127.0.0.2",
    "state": "active",
    "exit_code": None,
}


def new_job(store: JobStore) -> str:
    record = store.create(
        owner="alice",
        resource_id="local",
        spec={},
        effective_spec={},
        plan=stored_plan(cluster_size=1),
        script="true",
    )
    return record.id


def store_members(store: JobStore, job_id: str, members: list[dict[str, Any]]) -> None:
    """Members read while the job's state stays as it was: the engine's poll cycle stores
    them with a change that keeps the state and message (`tracking._with_members`)."""
    record = store.get(job_id)
    assert record is not None
    store.transition_many(
        [StateChange(job_id, record.state, record.message or "", members=members)]
    )


def test_a_new_job_has_no_members(database_url: str) -> None:
    store = JobStore(database_url)
    job_id = new_job(store)
    assert store.get(job_id).members == []  # type: ignore[union-attr]
    assert JobStore(database_url).get(job_id).members == []  # type: ignore[union-attr]


def test_members_alone_are_stored_cached_and_kept_out_of_the_history(database_url: str) -> None:
    store = JobStore(database_url)
    job_id = new_job(store)
    history = store.get(job_id).history  # type: ignore[union-attr]
    store_members(store, job_id, [WORKER])
    returned = store.get(job_id)
    assert returned is not None and returned.members == [WORKER]
    assert store.get(job_id).members == [WORKER], "the cache has them"  # type: ignore[union-attr]
    reopened = JobStore(database_url).get(job_id)
    assert reopened is not None and reopened.members == [WORKER] and reopened.history == history


def test_a_poll_cycle_change_can_carry_members(database_url: str) -> None:
    store = JobStore(database_url)
    job_id = new_job(store)
    store.transition_many([StateChange(job_id, JobState.ACTIVE, "RUNNING", members=[WORKER])])
    assert store.get(job_id).members == [WORKER]  # type: ignore[union-attr]
    store.transition_many([StateChange(job_id, JobState.COMPLETED, "EXITED", 0)])
    record = JobStore(database_url).get(job_id)
    assert record is not None and record.members == [WORKER], "no members: left as they were"
    assert record.state == JobState.COMPLETED


# ---- the stored plan and paths, read back typed ------------------------------------------------

# A plan as the first release stored it (every field `Plan` had in commit f830dee).
FIRST_RELEASE_PLAN: dict[str, Any] = {
    "facility": "nersc",
    "resource": "perlmutter-gpu",
    "scheduler": "slurm",
    "queue": "regular",
    "runtime": "podman-hpc",
    "image": "docker.io/library/ubuntu:22.04",
    "image_form": "registry",
    "launcher": "mpi",
    "gpu": {"flags": ["--gpu"], "devices": [], "gpus_per_node": 4},
    "mpi": {
        "flavour": "cray-mpich",
        "launcher": "srun",
        "container_flags": ["--mpi"],
        "modules": [],
    },
    "mounts": [{"source": "/pscratch/in", "target": "/input", "read_only": True}],
    "shape": {
        "node_count": 2,
        "process_count": 8,
        "processes_per_node": 4,
        "cpus_per_process": None,
        "gpus_per_process": 1,
        "gpus_per_node": 4,
        "memory_mib": None,
        "walltime_seconds": 3600,
        "exclusive": True,
    },
    "pre_submit": [["podman-hpc", "pull", "docker.io/library/ubuntu:22.04"]],
    "warnings": [],
}


def test_a_plan_the_first_release_stored_reads_back_typed(database_url: str) -> None:
    store = JobStore(database_url)
    record = store.create(
        owner="alice",
        resource_id="perlmutter-gpu",
        spec={},
        effective_spec={},
        plan=FIRST_RELEASE_PLAN,
        script="#!/bin/bash\n",
    )
    plan = JobStore(database_url).get(record.id).plan_model  # type: ignore[union-attr]
    assert plan.pre_submit == [["podman-hpc", "pull", "docker.io/library/ubuntu:22.04"]]
    assert plan.script == "#!/bin/bash\n"
    assert plan.cluster is None and plan.flavour is None and plan.flavours == []


@pytest.mark.parametrize("rename", [("pre_submit", "staging"), ("cluster", "roles_view")])
def test_a_renamed_plan_field_fails_loudly(database_url: str, rename: tuple[str, str]) -> None:
    """A stored plan whose field the model no longer has (renamed) is an error, whether the
    field was required (`pre_submit`) or had a default (`cluster`): never read as absent."""
    old, new = rename
    plan = stored_plan(cluster_size=2)
    plan[new] = plan.pop(old)
    record = JobStore(database_url).create(
        owner="alice", resource_id="local", spec={}, effective_spec={}, plan=plan, script="true"
    )
    with pytest.raises(ValidationError):
        record.plan_model  # noqa: B018


def test_job_paths_are_the_jobspec_fields_of_the_same_names() -> None:
    """`JobPaths` reads three JobSpec fields back without validating the whole spec: a JobSpec
    field renamed or retyped must fail here, not leave a path unread."""
    assert set(JobPaths.model_fields) <= set(JobSpec.model_fields)
    spec = JobSpec(executable="x", directory="/w/1", stdout_path="o.txt", stderr_path="/e")
    paths = JobPaths.model_validate(spec.model_dump(mode="json", exclude_unset=True))
    assert paths.model_dump() == spec.model_dump(include=set(JobPaths.model_fields))


def test_cluster_size_reads_the_stored_plans_cluster(database_url: str) -> None:
    """`cluster_size` reads one field of the stored plan without validating the plan: it
    must agree with the typed plan for a cluster job and for a plain one."""
    store = JobStore(database_url)
    for size in (None, 3):
        record = store.create(
            owner="alice",
            resource_id="local",
            spec={},
            effective_spec={},
            plan=stored_plan(cluster_size=size),
            script="true",
        )
        typed = record.plan_model.cluster
        assert record.cluster_size == (None if typed is None else typed.size) == size


def test_paths_and_named_directory_read_the_stored_specs(database_url: str) -> None:
    store = JobStore(database_url)
    made = store.create(
        owner="alice",
        resource_id="local",
        spec={"executable": "x"},
        effective_spec={"executable": "x", "directory": "/w/1", "stdout_path": "stdout.txt"},
        plan=stored_plan(),
        script="true",
    )
    named = store.create(
        owner="alice",
        resource_id="local",
        spec={"executable": "x", "directory": "/tmp/mine"},
        effective_spec={"executable": "x", "directory": "/tmp/mine"},
        plan=stored_plan(),
        script="true",
    )
    assert made.paths == JobPaths(directory="/w/1", stdout_path="stdout.txt")
    assert not made.named_directory and named.named_directory
    assert named.effective_spec_model.directory == "/tmp/mine"


def test_the_record_cache_is_bounded_least_recently_used_out_first(database_url: str) -> None:
    store = JobStore(database_url, cache_records=2)
    first, second, third = (new_job(store) for _ in range(3))
    cached = store._cache  # the read-through cache itself: what it holds is the point here
    assert len(cached) == 2
    assert cached.get(first) is None and cached.get(third) is not None
    cached.get(second)  # used last: kept
    fourth = new_job(store)
    assert len(cached) == 2 and cached.get(third) is None
    assert cached.get(second) is not None and cached.get(fourth) is not None
    again = store.get(first)
    assert again is not None and again.id == first, "what left the cache is read from the database"
    assert len(cached) == 2


def test_a_restart_is_kept_and_a_change_read_before_it_is_dropped(database_url: str) -> None:
    """The poll read the job, then the user restarted it: the earlier run's ending (made from
    the record as read) must not overwrite the restart; the history keeps both runs."""
    store = JobStore(database_url)
    job_id = new_job(store)
    store.transition(job_id, JobState.ACTIVE, "RUNNING")
    store.transition_many([StateChange(job_id, JobState.COMPLETED, "EXITED", 0, members=[WORKER])])
    read = store.get(job_id)
    assert read is not None
    store.restarted(job_id, "restart 1: scontrol requeue 41")
    store.transition_many(
        [StateChange(job_id, JobState.FAILED, "stale", 1, read_at=read.updated_at)]
    )
    record = JobStore(database_url).get(job_id)
    assert record is not None
    assert (record.state, record.message, record.exit_code, record.members) == (
        JobState.QUEUED,
        "restart 1: scontrol requeue 41",
        None,
        [],
    )
    assert [h["state"] for h in record.history] == ["new", "active", "completed", "queued"]
    store.transition_many(
        [StateChange(job_id, JobState.ACTIVE, "RUNNING", read_at=record.updated_at)]
    )
    assert store.get(job_id).state == JobState.ACTIVE  # type: ignore[union-attr]
