"""GroupCommit: requests made together are written together, each answered with its own
answer or error, and a failed write fails every request of its batch and no other."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from iri_gateway.models.job import JobState
from iri_gateway.service.operations.group_commit import GroupCommit
from iri_gateway.service.operations.store import JobStore
from tests.conftest import recorded_job


def test_requests_waiting_behind_a_write_share_the_next_one() -> None:
    batches: list[list[int]] = []
    first_entered, release = threading.Event(), threading.Event()

    def write(requests: Sequence[int]) -> list[int | BaseException]:
        batches.append(list(requests))
        if len(batches) == 1:  # the first write holds the turn while the others arrive
            first_entered.set()
            release.wait(10)
        return [request * 10 if request != 3 else ValueError("three") for request in requests]

    group: GroupCommit[int, int] = GroupCommit(write)
    answers: dict[int, object] = {}

    def call(request: int) -> None:
        try:
            answers[request] = group(request)
        except ValueError as error:
            answers[request] = error

    leader = threading.Thread(target=call, args=(0,))
    leader.start()
    assert first_entered.wait(10)
    others = [threading.Thread(target=call, args=(n,)) for n in range(1, 6)]
    for thread in others:
        thread.start()
    while len(group._waiting) < 5:  # every other request waits behind the first write
        threading.Event().wait(0.01)
    release.set()
    for thread in [leader, *others]:
        thread.join(10)
    assert batches[0] == [0] and sorted(batches[1]) == [1, 2, 3, 4, 5] and len(batches) == 2
    assert {n: a for n, a in answers.items() if n != 3} == {0: 0, 1: 10, 2: 20, 4: 40, 5: 50}
    assert isinstance(answers[3], ValueError) and str(answers[3]) == "three"


def test_a_write_that_fails_fails_its_batch_and_the_next_caller_writes_afresh() -> None:
    calls = []

    def write(requests: Sequence[str]) -> list[str | BaseException]:
        calls.append(list(requests))
        if requests == ["bad"]:
            raise RuntimeError("the database went away")
        return [request.upper() for request in requests]

    group: GroupCommit[str, str] = GroupCommit(write)
    with pytest.raises(RuntimeError, match="went away"):
        group("bad")
    assert group("good") == "GOOD"
    assert calls == [["bad"], ["good"]]


def test_native_ids_set_by_many_submitters_at_once_each_land(tmp_path: Path) -> None:
    store = JobStore(f"sqlite:///{tmp_path}/jobs.db")
    jobs = [recorded_job(store, submitting=True) for _ in range(40)]
    barrier = threading.Barrier(len(jobs))
    seen: dict[str, str] = {}

    def submitted(index: int) -> None:
        barrier.wait()
        record = store.set_native_id(jobs[index].id, f"n{index}", f"submitted as n{index}")
        seen[record.id] = record.native_id or ""

    threads = [threading.Thread(target=submitted, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert seen == {job.id: f"n{i}" for i, job in enumerate(jobs)}
    fresh = JobStore(f"sqlite:///{tmp_path}/jobs.db")  # what was committed, not the cache
    for i, job in enumerate(jobs):
        record = fresh.get(job.id)
        assert record is not None
        assert (record.state, record.native_id, record.claimed_by) == (
            JobState.QUEUED,
            f"n{i}",
            None,
        )
        assert record.history[-1]["message"] == f"submitted as n{i}"
    with pytest.raises(KeyError):
        store.set_native_id("no-such-job", "n", "submitted as n")
