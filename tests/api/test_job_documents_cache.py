"""The cache of encoded status documents (`api/compute/documents.py`): a page answered from
it is byte for byte the page encoded afresh, and a job that changed in any way is encoded
again, even when its `updated_at` did not move (a frozen clock) and when another process
changed it (a second store on the same database)."""

from __future__ import annotations

import json
from pathlib import Path

from iri_gateway.api.compute.documents import JobDocuments
from iri_gateway.api.compute.models import job_answer, job_document, json_bytes
from iri_gateway.models.job import JobState
from iri_gateway.service.operations.store import JobRecord, JobStore, StateChange
from tests.api.test_job_document import JOBS, MEMBERS, _stored


class CountingEncoder:
    """`job_document` encoded as the gateway does, counting the records it encodes."""

    def __init__(self) -> None:
        self.encoded: list[str] = []

    def __call__(self, record: JobRecord) -> bytes:
        self.encoded.append(record.id)
        return json_bytes(job_document(record, include_spec=False))


def _frozen_store(url: str) -> JobStore:
    return JobStore(url, clock=lambda: 1_000_000.0, cache_records=0)


def test_a_page_from_the_cache_is_the_page_encoded_afresh(database_url: str) -> None:
    store = JobStore(database_url, cache_records=0)
    for resource_id, document in JOBS.values():
        _stored(store, resource_id, document)
    encoder = CountingEncoder()
    documents = JobDocuments(encoder)
    page = store.find(owner="alice")
    fresh = job_answer(page, include_spec=False).body
    first = job_answer(page, include_spec=False, documents=documents).body
    again = job_answer(store.find(owner="alice"), include_spec=False, documents=documents).body
    assert first == fresh == again
    assert len(encoder.encoded) == len(page)  # the second page encoded nothing
    single = job_answer(page[0], include_spec=False, documents=documents).body
    assert single == job_answer(page[0], include_spec=False).body
    assert len(encoder.encoded) == len(page)


def test_every_change_is_shown_even_with_the_same_updated_at(tmp_path: Path) -> None:
    """With a clock that never moves, `updated_at` stays the same through every change:
    the cache compares the stored values themselves, so each change is shown."""
    url = f"sqlite:///{tmp_path}/jobs.db"
    store = _frozen_store(url)
    job_id = _stored(store, *JOBS["cluster"])
    documents = JobDocuments(CountingEncoder())

    def shown() -> dict[str, object]:
        record = store.get(job_id)
        assert record is not None
        document: dict[str, object] = json.loads(documents.encoded(record))
        assert document == job_document(record, include_spec=False)
        return document

    before = shown()
    store.transition_many([StateChange(job_id, JobState.ACTIVE, "running")])
    running = shown()
    assert running != before and running["status"]["state"] == "active"  # type: ignore[index]
    store.transition_many([StateChange(job_id, JobState.ACTIVE, "running", members=MEMBERS)])
    with_members = shown()
    assert with_members["status"]["meta_data"]["members"] == MEMBERS  # type: ignore[index]
    assert store.get(job_id).updated_at == 1_000_000.0  # type: ignore[union-attr]


def test_a_change_made_by_another_process_is_shown(database_url: str) -> None:
    """Two stores on one database stand for two replicas: what one changes, the other's
    cache shows at its next read."""
    reader, writer = JobStore(database_url, cache_records=0), JobStore(database_url)
    job_id = _stored(writer, *next(iter(JOBS.values())))
    documents = JobDocuments(CountingEncoder())
    record = reader.get(job_id)
    assert record is not None
    assert json.loads(documents.encoded(record))["status"]["state"] == "new"
    writer.transition_many([StateChange(job_id, JobState.FAILED, "refused", 1)])
    record = reader.get(job_id)
    assert record is not None
    document = json.loads(documents.encoded(record))
    assert document["status"]["state"] == "failed" and document["status"]["exit_code"] == 1


def test_the_cache_is_bounded_and_decoded_records_are_never_kept(tmp_path: Path) -> None:
    store = JobStore(f"sqlite:///{tmp_path}/jobs.db", cache_records=0)
    resource_id, document = next(iter(JOBS.values()))
    for _ in range(7):
        _stored(store, resource_id, document)
    encoder = CountingEncoder()
    documents = JobDocuments(encoder, capacity=3)
    for record in store.find(owner="alice"):
        documents.encoded(record)
    assert len(documents) == 3
    # A record given decoded (as the writes return them) has no stored texts to compare:
    # encoded every time, never kept.
    written = store.create(
        owner="alice",
        resource_id=resource_id,
        spec={"executable": "/bin/true"},
        effective_spec={"executable": "/bin/true"},
        plan=store.find(owner="alice")[0].plan,
        script="#!/bin/sh\n",
    )
    before = len(encoder.encoded)
    documents.encoded(written)
    documents.encoded(written)
    assert len(encoder.encoded) == before + 2
    assert len(documents) == 3
