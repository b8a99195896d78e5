"""The submitter (issue 13, items 1 and 2): submission off the caller's thread, a bounded number
of scheduler commands per resource, retries with growing pauses while the scheduler is down.

The engine runs on the `local` resource with its real batch system; where a test needs the
scheduler slow or unavailable, that one instance's `submit` is wrapped (a stand-in for a slow
or stopped slurmctld, which the integration tests use for real): the wrapper blocks on events
or raises the error the Slurm adapter raises, and counts what it was asked.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.errors import SchedulerUnavailableError, SubmitError
from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.jobs.submitter import Submitter, pause
from iri_gateway.service.operations.backends import Backends
from iri_gateway.service.operations.store import JobRecord, JobStore

JOB = parse_jobspec({"executable": "/bin/true"})


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    registry = ProfileRegistry.from_files([builtin_profile("local")])
    made = Engine(
        registry=registry,
        store=JobStore(f"sqlite:///{tmp_path}/jobs.db"),
        backends=Backends(tmp_path),
        submitter=Submitter(concurrency=16, first_pause=0.05, longest_pause=0.2),
    )
    yield made
    made.close()


class Scheduler:
    """Wraps the local batch system's `submit`: counts calls and calls in flight, can hold
    them until released, or refuse them as an unavailable Slurm does."""

    def __init__(self, engine: Engine) -> None:
        self.batch = engine.backends.get(engine.registry.get("local"), "alice").batch
        self.real: Callable[..., str] = self.batch.submit
        self.calls = 0
        self.in_flight = 0
        self.most = 0
        self.down = 0  # refuse this many more calls as unavailable
        self.reached = False
        self.gate = threading.Event()
        self.gate.set()
        self.changed = threading.Condition()
        self.batch.submit = self.submit  # type: ignore[method-assign]

    def submit(self, script: str, *, tag: str) -> str:
        with self.changed:
            self.calls += 1
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.changed.notify_all()
        try:
            self.gate.wait(30)
            with self.changed:
                if self.down:
                    self.down -= 1
                    raise SchedulerUnavailableError(
                        ["sbatch"],
                        1,
                        "",
                        "sbatch: error: Batch job submission failed: "
                        "Unable to contact slurm controller (connect failure)",
                        action="submission",
                        reached=self.reached,
                    )
            return self.real(script, tag=tag)
        finally:
            with self.changed:
                self.in_flight -= 1
                self.changed.notify_all()

    def wait_until(self, condition: Callable[[], bool]) -> None:
        with self.changed:
            assert self.changed.wait_for(condition, timeout=30), (self.calls, self.in_flight)


def settled(engine: Engine, job_id: str, done: Callable[[JobRecord], bool]) -> JobRecord:
    deadline = time.monotonic() + 30
    while True:
        record = engine.store.get(job_id)
        assert record is not None
        if done(record):
            return record
        assert time.monotonic() < deadline, record
        time.sleep(0.02)


def test_pauses_grow_and_are_capped() -> None:
    assert [pause(n, first=1, longest=60) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert pause(10_000, first=1, longest=60) == 60


def test_each_lane_runs_its_bound_at_once_and_no_more() -> None:
    submitter = Submitter(concurrency=4)
    lock = threading.Condition()
    running: dict[str, int] = {"a": 0, "b": 0}
    release = threading.Event()

    def work(lane: str) -> Callable[[], None]:
        def run() -> None:
            with lock:
                running[lane] += 1
                lock.notify_all()
            release.wait(30)

        return run

    try:
        futures = [submitter.run("a", work("a")) for _ in range(10)]
        other = submitter.run("b", work("b"))
        with lock:
            assert lock.wait_for(lambda: running["a"] == 4 and running["b"] == 1, timeout=30)
        # Four of lane a run and block; the six others wait in line, not started.
        assert sum(f.running() for f in futures) == 4
        assert sum(not f.running() and not f.done() for f in futures) == 6
        release.set()
        for future in [*futures, other]:
            future.result(timeout=30)
        assert running["a"] == 10
    finally:
        release.set()
        submitter.close()


def test_later_runs_after_the_pause_and_not_after_close() -> None:
    submitter = Submitter()
    ran = threading.Event()
    assert submitter.later(0.05, ran.set)
    assert ran.wait(10)
    submitter.close()
    assert not submitter.later(0.0, lambda: None), "a closed submitter takes no retries"


def test_sixteen_launches_are_sixteen_submissions_in_flight(engine: Engine) -> None:
    scheduler = Scheduler(engine)
    scheduler.gate.clear()
    submissions = [
        engine.submit(owner="alice", resource_id="local", spec=JOB, wait=0) for _ in range(17)
    ]
    scheduler.wait_until(lambda: scheduler.in_flight == 16)
    assert all(s.record.state == JobState.NEW for s in submissions)
    # The 17th waits for a slot, and its answer says so.
    assert "waiting for one of the 16 submission slots" in (submissions[-1].record.message or "")
    assert scheduler.calls == 16
    scheduler.gate.set()
    for submission in submissions:
        settled(engine, submission.record.id, lambda r: r.native_id is not None)
    assert scheduler.calls == 17 and scheduler.most == 16


def test_answer_after_the_wait_is_new_and_the_job_is_queued_later(engine: Engine) -> None:
    scheduler = Scheduler(engine)
    scheduler.gate.clear()
    started = time.monotonic()
    submission = engine.submit(owner="alice", resource_id="local", spec=JOB, wait=0.3)
    assert time.monotonic() - started < 5
    record = submission.record
    assert record.state == JobState.NEW and record.native_id is None
    assert record.message == "accepted by the gateway; being sent to the scheduler"
    assert engine.reconcile(settle=engine.settle_time) == [], "the submitter's, not reconciled"
    assert engine.reconcile(settle=0) == [], "not even at settle 0: it is being sent"
    scheduler.gate.set()
    queued = settled(engine, record.id, lambda r: r.native_id is not None)
    assert queued.state in (JobState.QUEUED, JobState.ACTIVE, JobState.COMPLETED)
    assert scheduler.calls == 1


def test_unavailable_scheduler_leaves_the_job_new_and_it_is_sent_when_back(
    engine: Engine,
) -> None:
    scheduler = Scheduler(engine)
    scheduler.down = 3
    submission = engine.submit(owner="alice", resource_id="local", spec=JOB)
    record = submission.record
    assert record.state == JobState.NEW, "accepted, never failed, during an outage"
    assert record.message is not None
    assert "waiting for the scheduler, trying again in 0.05 s" in record.message
    assert "Unable to contact slurm controller" in record.message
    # Claimed by the submitter between attempts: the reconcile does not send it as well.
    assert engine.reconcile(settle=0) == []
    queued = settled(engine, record.id, lambda r: r.native_id is not None)
    assert scheduler.calls == 4, "three refusals, then one submission: never two"
    states = [entry["state"] for entry in queued.history]
    assert "failed" not in states
    pauses = [entry["message"] for entry in queued.history if "trying again" in entry["message"]]
    assert [m.split("trying again in ")[1].split(" s")[0] for m in pauses] == ["0.05", "0.1", "0.2"]


def test_outcome_unknown_is_left_to_the_reconcile_by_tag(engine: Engine) -> None:
    scheduler = Scheduler(engine)
    scheduler.down = 1
    scheduler.reached = True  # timed out after sending: Slurm may have the job
    record = engine.submit(owner="alice", resource_id="local", spec=JOB).record
    assert record.state == JobState.NEW
    assert "outcome unknown, will check by its tag" in (record.message or "")
    time.sleep(0.5)
    assert scheduler.calls == 1, "the submitter never sends it again blindly"
    actions = engine.reconcile(settle=0)
    assert actions == [f"{record.id}: resubmitted (the scheduler never saw it)"]
    assert scheduler.calls == 2


def test_refusal_is_raised_and_the_job_failed(engine: Engine) -> None:
    scheduler = Scheduler(engine)

    def refuse(script: str, *, tag: str) -> str:
        raise SubmitError(["sbatch"], 1, "", "sbatch: error: invalid partition specified")

    scheduler.real = refuse
    with pytest.raises(SubmitError, match="invalid partition"):
        engine.submit(owner="alice", resource_id="local", spec=JOB, idempotency_key="k")
    (record,) = engine.store.find(owner="alice")
    assert record.state == JobState.FAILED and "invalid partition" in (record.message or "")
    # The retry with the same key reads the outcome; no second submission.
    again = engine.submit(owner="alice", resource_id="local", spec=JOB, idempotency_key="k")
    assert again.replayed and again.record.state == JobState.FAILED
    assert scheduler.calls == 1


def test_retry_with_the_key_while_the_first_waits_is_the_same_job(engine: Engine) -> None:
    scheduler = Scheduler(engine)
    scheduler.gate.clear()
    first = engine.submit(
        owner="alice", resource_id="local", spec=JOB, idempotency_key="k", wait=0.1
    )
    answers: list[Any] = []
    retry = threading.Thread(
        target=lambda: answers.append(
            engine.submit(
                owner="alice", resource_id="local", spec=JOB, idempotency_key="k", wait=30
            )
        )
    )
    retry.start()
    time.sleep(0.2)
    scheduler.gate.set()
    retry.join(30)
    (again,) = answers
    assert again.replayed and again.record.id == first.record.id
    assert again.record.native_id is not None, "the retry waited for the first attempt"
    assert scheduler.calls == 1


def test_key_raced_past_the_lookup_replays_the_winner(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two requests both find no job for the key; the store's unique key lets one create it
    and the other replays that job (no second job, no conflict)."""
    won = engine.submit(owner="alice", resource_id="local", spec=JOB, idempotency_key="k")
    real = engine.store.by_idempotency_key
    lookups: list[str] = []

    def missed_once(owner: str, key: str) -> JobRecord | None:
        lookups.append(key)
        return None if len(lookups) == 1 else real(owner, key)

    monkeypatch.setattr(engine.store, "by_idempotency_key", missed_once)
    lost = engine.submit(owner="alice", resource_id="local", spec=JOB, idempotency_key="k")
    assert lost.replayed and lost.record.id == won.record.id
    assert len(engine.store.find(owner="alice")) == 1
    assert lookups == ["k", "k"]


def test_cancel_while_waiting_for_the_scheduler_never_submits(engine: Engine) -> None:
    scheduler = Scheduler(engine)
    scheduler.down = 1_000
    record = engine.submit(owner="alice", resource_id="local", spec=JOB).record
    canceled = engine.cancel(owner="alice", job_id=record.id)
    assert canceled.desired == "canceled"
    scheduler.down = 0
    final = settled(engine, record.id, lambda r: r.state.final)
    assert final.state == JobState.CANCELED and final.native_id is None
    assert "canceled before it reached the scheduler" in (final.message or "")


def test_close_drops_waiting_retries_and_the_next_start_sends_them(tmp_path: Path) -> None:
    registry = ProfileRegistry.from_files([builtin_profile("local")])
    url = f"sqlite:///{tmp_path}/jobs.db"
    first = Engine(
        registry=registry,
        store=JobStore(url),
        backends=Backends(tmp_path),
        submitter=Submitter(first_pause=60),
    )
    scheduler = Scheduler(first)
    scheduler.down = 1
    record = first.submit(owner="alice", resource_id="local", spec=JOB).record
    assert record.state == JobState.NEW
    first.close()
    again = Engine(registry=registry, store=JobStore(url), backends=Backends(tmp_path))
    try:
        assert again.reconcile() == [f"{record.id}: resubmitted (the scheduler never saw it)"]
        assert again.store.get(record.id).native_id is not None  # type: ignore[union-attr]
    finally:
        again.close()


def test_a_fault_of_the_first_attempt_answers_the_job_accepted_and_the_reconcile_sends_it(
    engine: Engine,
) -> None:
    """A fault that is neither the scheduler's answer nor the transport's (the database busy
    past its time-out, a bug) once reached the client as a bare 500 although the job was
    recorded; a client sending it again made two jobs. Now the job is answered `new`, its
    message naming the fault, and the reconcile sends it once."""
    scheduler = Scheduler(engine)
    real = scheduler.real
    faults = [RuntimeError("database is locked")]

    def fail_once(script: str, *, tag: str) -> str:
        if faults:
            raise faults.pop()
        return real(script, tag=tag)

    scheduler.real = fail_once
    record = engine.submit(owner="alice", resource_id="local", spec=JOB).record
    assert record.state == JobState.NEW
    assert "the first attempt to send it failed (RuntimeError: database is locked)" in (
        record.message or ""
    )
    stored = settled(engine, record.id, lambda r: r.claimed_by is None)
    assert stored.native_id is None and scheduler.calls == 1
    actions = engine.reconcile(settle=0)
    assert actions == [f"{record.id}: resubmitted (the scheduler never saw it)"]
    assert scheduler.calls == 2
    assert settled(engine, record.id, lambda r: r.native_id is not None).state != JobState.FAILED


def test_a_draining_close_lets_commands_finish_until_the_deadline_then_cuts_the_rest() -> None:
    """close(deadline=...): the commands queued and running get until the deadline; what is
    still queued then never runs, what still runs is counted as cut."""
    submitter = Submitter(concurrency=1)
    release = threading.Event()
    done: list[str] = []

    def quick(name: str) -> Callable[[], None]:
        return lambda: done.append(name)

    def stuck() -> None:
        release.wait(30)
        done.append("stuck")

    first = submitter.run("a", quick("first"))
    queued = submitter.run("a", quick("queued"))
    first.result(timeout=10)
    queued.result(timeout=10)
    assert submitter.busy() == 0
    # one lane, one worker: a quick command waits behind nothing and finishes in the drain
    finishing = submitter.run("b", quick("in the drain"))
    blocking = submitter.run("c", stuck)
    behind = submitter.run("c", quick("behind the stuck one"))
    started = time.monotonic()
    try:
        cut = submitter.close(deadline=time.monotonic() + 0.5)
        took = time.monotonic() - started
        assert finishing.done() and "in the drain" in done
        assert behind.cancelled(), "work not started at the deadline is dropped"
        assert not blocking.done() and cut == 2, cut  # the stuck one, and the dropped one
        assert 0.4 < took < 5, took
    finally:
        release.set()
    blocking.result(timeout=10)
    assert "behind the stuck one" not in done
