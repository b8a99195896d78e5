"""Submissions whose outcome is unknown are settled while the gateway runs (issue 11, item 1).

Against the real Slurm of the test cluster, through the engine and the real poller. The
transport is the real one wrapped by `LostAnswer`, a fault injector: it makes sbatch's answer
get lost, either after sbatch really ran (the job exists; the gateway does not know its id)
or before it was sent (a plain TransportError: the outcome is unknown to the gateway).
Either way the job stays `new`, never `failed`, and the poller's
continuous reconcile settles it without a restart: adopted by its tag, or resubmitted once
`settle_time` has passed and the scheduler surely never saw it — and never while this engine
is still sending it.
"""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.jobs.poller import Poller
from iri_gateway.service.operations.store import JobRecord
from iri_gateway.transport.base import CommandResult, TransportError
from tests.integration.conftest import make_engine
from tests.integration.gateway_process import profile_allowing

pytestmark = pytest.mark.integration


class LostAnswer:
    """The real transport, but the answer of the next `sbatch` is lost (`when`: "after" it
    ran, or "before" it was sent); with `gate`, sbatch first waits for the gate to open."""

    def __init__(self, inner: Any, when: str, gate: threading.Event | None = None) -> None:
        self.inner, self.when, self.gate = inner, when, gate
        self.name = inner.name
        self.lose = 1 if when else 0
        self.sending = threading.Event()  # set when a gated sbatch has started

    def run(self, argv: Sequence[str], **options: Any) -> CommandResult:
        if argv[0] == "sbatch":
            if self.gate is not None:
                assert not self.sending.is_set(), "sbatch again while the first is being sent"
                self.sending.set()
                assert self.gate.wait(60)
            if self.lose:
                self.lose -= 1
                if self.when == "after":
                    self.inner.run(argv, **options)
                raise TransportError("the answer was lost (fault injected by the test)")
        result: CommandResult = self.inner.run(argv, **options)
        return result


@pytest.fixture
def name() -> Iterator[str]:
    unique = f"iri-recon-{uuid.uuid4().hex[:10]}"
    yield unique
    subprocess.run(["scancel", "-n", unique], capture_output=True, timeout=60, check=False)


@pytest.fixture
def engine(cluster_profile: Path, tmp_path: Path) -> Iterator[Engine]:
    built = make_engine(profile_allowing(cluster_profile, ["begin"], tmp_path), tmp_path)
    yield built
    built.backends.close()


def inject(engine: Engine, when: str, gate: threading.Event | None = None) -> LostAnswer:
    """Put a LostAnswer around the real transport of root's jobs on `cluster`."""
    batch: Any = engine.backends.get(engine.registry.get("cluster"), "root").batch
    batch.transport = LostAnswer(batch.transport, when, gate)
    return batch.transport  # type: ignore[no-any-return]


def held(name: str) -> Any:
    return parse_jobspec(
        {
            "name": name,
            "executable": "/bin/true",
            "attributes": {"duration": 60, "custom_attributes": {"begin": "now+1hour"}},
        }
    )


def jobs_tagged(tag: str) -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-o", "%i|%k"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [line.split("|")[0] for line in out.splitlines() if line.split("|")[1] == tag]


def current(engine: Engine, record: JobRecord) -> JobRecord:
    found = engine.store.get(record.id)
    assert found is not None
    return found


def test_lost_answer_of_a_submitted_job_is_adopted_without_restart(
    engine: Engine, name: str
) -> None:
    inject(engine, "after")
    record = engine.submit(owner="root", resource_id="cluster", spec=held(name)).record
    assert record.state == JobState.NEW and record.native_id is None
    assert "outcome unknown" in (record.message or "")
    (in_slurm,) = jobs_tagged(record.tag)
    Poller(engine).cycle(force=True)
    adopted = current(engine, record)
    assert adopted.native_id == in_slurm
    assert adopted.state in (JobState.QUEUED, JobState.HELD)
    assert jobs_tagged(record.tag) == [in_slurm], "adopted, not submitted again"


def test_unseen_submission_is_resubmitted_once_settled(engine: Engine, name: str) -> None:
    inject(engine, "before")
    engine.settle_time = 2.0
    record = engine.submit(owner="root", resource_id="cluster", spec=held(name)).record
    assert record.state == JobState.NEW and record.native_id is None
    poller = Poller(engine)
    poller.cycle(force=True)  # too early: the lost command might still be running
    assert current(engine, record).native_id is None and jobs_tagged(record.tag) == []
    threading.Event().wait(engine.settle_time)
    poller.cycle(force=True)
    resubmitted = current(engine, record)
    assert resubmitted.native_id is not None
    assert jobs_tagged(record.tag) == [resubmitted.native_id]


def test_submission_in_flight_is_left_alone(engine: Engine, name: str) -> None:
    gate = threading.Event()
    lost = inject(engine, "", gate)
    engine.settle_time = 0.0
    submitted: list[JobRecord] = []
    sender = threading.Thread(
        target=lambda: submitted.append(
            engine.submit(owner="root", resource_id="cluster", spec=held(name)).record
        )
    )
    sender.start()
    try:
        assert lost.sending.wait(30)
        (waiting,) = engine.store.unsettled()
        assert waiting.native_id is None
        assert engine.reconcile() == [], "nothing to do for a job being sent"
        assert jobs_tagged(waiting.tag) == []
    finally:
        gate.set()
        sender.join(timeout=60)
    (record,) = submitted
    assert record.native_id is not None
    assert jobs_tagged(record.tag) == [record.native_id], "sent once"
