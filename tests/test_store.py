"""The job store: a cluster job's members, and databases made before the members column."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from iri_gateway.models.job import JobState
from iri_gateway.service.store import JobStore, StateChange

WORKER = {"name": "worker1", "role": "worker", "index": 1, "node": "n2",
          "address": "127.0.0.2", "state": "active", "exit_code": None}

# The jobs table exactly as the release before cluster jobs created it (`.schema` of a
# database made by store.py of commit 5901d31), with one finished job in it.
OLD_SCHEMA = """
CREATE TABLE jobs (
	id VARCHAR(36) NOT NULL,
	owner VARCHAR(255) NOT NULL,
	resource_id VARCHAR(63) NOT NULL,
	idempotency_key VARCHAR(255),
	request_hash VARCHAR(64),
	spec JSON NOT NULL,
	effective_spec JSON NOT NULL,
	"plan" JSON NOT NULL,
	script TEXT NOT NULL,
	native_id VARCHAR(64),
	state VARCHAR(16) NOT NULL,
	desired VARCHAR(16) NOT NULL,
	exit_code INTEGER,
	message TEXT,
	history JSON NOT NULL,
	submit_attempted_at FLOAT,
	created_at FLOAT NOT NULL,
	updated_at FLOAT NOT NULL,
	PRIMARY KEY (id),
	CONSTRAINT uq_owner_key UNIQUE (owner, idempotency_key)
);
CREATE INDEX ix_jobs_native_id ON jobs (native_id);
CREATE INDEX ix_jobs_owner ON jobs (owner);
CREATE INDEX ix_jobs_state ON jobs (state);
CREATE INDEX ix_jobs_resource_id ON jobs (resource_id);
INSERT INTO jobs VALUES ('old-job', 'alice', 'local', NULL, NULL, '{}', '{}', '{}', 'true',
    '42', 'completed', 'submitted', 0, 'EXITED, exit code 0', '[]', NULL, 1.0, 2.0);
"""


def store_in(folder: Path) -> JobStore:
    return JobStore(f"sqlite:///{folder}/jobs.db")


def new_job(store: JobStore) -> str:
    record = store.create(owner="alice", resource_id="local", spec={}, effective_spec={},
                          plan={"cluster": {"size": 1}}, script="true")
    return record.id


def test_a_new_job_has_no_members(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    job_id = new_job(store)
    assert store.get(job_id).members == []  # type: ignore[union-attr]
    assert store_in(tmp_path).get(job_id).members == []  # type: ignore[union-attr]


def test_set_members_is_stored_cached_and_kept_out_of_the_history(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    job_id = new_job(store)
    history = store.get(job_id).history  # type: ignore[union-attr]
    returned = store.set_members(job_id, [WORKER])
    assert returned.members == [WORKER]
    assert store.get(job_id).members == [WORKER], "the cache has them"  # type: ignore[union-attr]
    reopened = store_in(tmp_path).get(job_id)
    assert reopened is not None and reopened.members == [WORKER] and reopened.history == history


def test_a_poll_cycle_change_can_carry_members(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    job_id = new_job(store)
    store.transition_many([StateChange(job_id, JobState.ACTIVE, "RUNNING", members=[WORKER])])
    assert store.get(job_id).members == [WORKER]  # type: ignore[union-attr]
    store.transition_many([StateChange(job_id, JobState.COMPLETED, "EXITED", 0)])
    record = store_in(tmp_path).get(job_id)
    assert record is not None and record.members == [WORKER], "no members: left as they were"
    assert record.state == JobState.COMPLETED


def test_a_database_from_before_members_gets_the_column(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "jobs.db") as connection:
        connection.executescript(OLD_SCHEMA)
    store = store_in(tmp_path)
    old = store.get("old-job")
    assert old is not None and old.members == [] and old.state == JobState.COMPLETED
    job_id = new_job(store)
    store.set_members(job_id, [WORKER])
    with sqlite3.connect(tmp_path / "jobs.db") as connection:
        columns = [row[1] for row in connection.execute("PRAGMA table_info(jobs)")]
        stored = connection.execute("SELECT members FROM jobs WHERE id = 'old-job'").fetchone()
    assert columns.count("members") == 1
    assert stored == ("[]",), "earlier jobs read as having no members, not NULL"
    reopened = store_in(tmp_path)  # a second start finds the column and adds nothing
    assert reopened.get(job_id).members == [WORKER]  # type: ignore[union-attr]
    assert reopened.get("old-job").members == []  # type: ignore[union-attr]
