"""Bulk launch below HTTP: `JobStore.create_many` on SQLite and PostgreSQL (`database_url`),
and the engine's `submit_many` on the `local` resource (real processes, a real store).

`create_many` records many jobs in one transaction and keeps `create`'s rule: the unique
(owner, key) decides a race, the job that holds a key is answered for it, the others are
recorded. `submit_many` hands its jobs to the submitter at most `concurrency` at a time, so
a launch of another user's queued behind a bulk waits for one worker, not for the bulk.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.jobs.submitter import Submitter
from iri_gateway.service.operations.backends import Backends
from iri_gateway.service.operations.store import JobStore
from tests.conftest import stored_plan


def job(key: str | None, owner: str = "alice") -> dict[str, Any]:
    return {
        "owner": owner,
        "resource_id": "local",
        "spec": {"name": key},
        "effective_spec": {},
        "plan": stored_plan(),
        "script": "true",
        "idempotency_key": key,
    }


def test_create_many_records_all_and_answers_a_taken_key_with_its_job(database_url: str) -> None:
    store = JobStore(database_url)
    try:
        earlier = store.create(**job("k#1"))
        recorded = store.create_many([job("k#0"), job("k#1"), job("k#2"), job(None)])
        assert [new for _, new in recorded] == [True, False, True, True]
        assert recorded[1][0].id == earlier.id
        assert [r.idempotency_key for r, _ in recorded] == ["k#0", "k#1", "k#2", None]
        assert len(store.find(owner="alice")) == 4
        for record, _ in recorded:
            assert store.get(record.id) == record
        assert store.create_many([]) == []
    finally:
        store.close()


def test_racing_create_many_make_each_job_once(database_url: str) -> None:
    """Four threads record the same 50 keys at once (two stores: on PostgreSQL, two
    connections racing in the database): each key is one job, every thread is told it."""
    stores = [JobStore(database_url), JobStore(database_url)]
    answers: list[list[str]] = []
    start = threading.Barrier(4)

    def record(store: JobStore) -> None:
        start.wait()
        answers.append([r.id for r, _ in store.create_many([job(f"r#{i}") for i in range(50)])])

    try:
        threads = [threading.Thread(target=record, args=(stores[n % 2],)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert len(answers) == 4 and all(answer == answers[0] for answer in answers)
        assert len(stores[0].find(owner="alice")) == 50
    finally:
        for store in stores:
            store.close()


def test_a_bulk_holds_at_most_concurrency_of_the_submitter(tmp_path: Path) -> None:
    """Twelve specs on a submitter of 2 workers: right after the call, at most 2 of them are
    handed over (the rest wait in the bulk's window, answered `new` "waiting for one of the
    2 submission slots"); a single launch made then is sent before the bulk's last ones; in
    the end all twelve are queued, each once."""
    engine = Engine(
        registry=ProfileRegistry.from_files([builtin_profile("local")]),
        store=JobStore(f"sqlite:///{tmp_path}/jobs.db"),
        backends=Backends(tmp_path),
        submitter=Submitter(concurrency=2),
    )
    spec = parse_jobspec({"executable": "/bin/true"})
    try:
        outcomes = engine.submit_many(
            owner="alice", resource_id="local", specs=[(i, spec) for i in range(12)], wait=0
        )
        assert engine.submitter.busy() <= 2
        assert [o.index for o in outcomes] == list(range(12))
        waiting = [o for o in outcomes if o.record and o.record.state == JobState.NEW]
        assert any(
            "waiting for one of the 2 submission slots" in (o.record.message or "")
            for o in waiting
            if o.record
        ), [o.record.message for o in outcomes if o.record]
        single = engine.submit(owner="bob", resource_id="local", spec=spec, wait=None).record
        assert single.state == JobState.QUEUED
        ids = [o.record.id for o in outcomes if o.record]
        deadline = time.monotonic() + 60
        while any(engine.store.get(i).native_id is None for i in ids):  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        sent = {i: engine.store.get(i) for i in ids}
        assert all(r is not None and r.state != JobState.NEW for r in sent.values())
        later = [r for r in sent.values() if r and r.updated_at > single.updated_at]
        assert later, "the single launch was not kept waiting behind the whole bulk"
        assert len({r.native_id for r in sent.values() if r}) == 12
    finally:
        engine.close()
