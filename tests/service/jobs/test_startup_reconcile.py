"""The server's start-up reconcile waits for a crashed process's last submission to settle.

A command the crashed process started (an sbatch retrying against a controller that was
down) outlives it and may still deliver the job; sending the job again at once would run it
twice. So a record whose attempt is younger than the settle time is left alone at start-up
(the poller's reconcile finishes it later), and one whose attempt is older is resubmitted."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from iri_gateway.api.app import create_app
from iri_gateway.models.job import JobState
from iri_gateway.planning.planner import make_plan
from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.operations.backends import Backends
from iri_gateway.service.operations.settings import Settings
from iri_gateway.service.operations.store import JobRecord, JobStore
from tests.service.jobs.test_engine_local import shell_job, wait_for


def attempted_record(engine: Engine, word: str, attempted_ago: float) -> JobRecord:
    """A job recorded and attempted `attempted_ago` seconds ago, as a crash leaves it."""
    loaded = engine.registry.get("local")
    directory = str(engine.backends.data_dir / "work" / word)
    effective = {
        "executable": "/bin/sh",
        "arguments": ["-c", f"echo {word}"],
        "directory": directory,
        "stdout_path": "stdout.txt",
        "stderr_path": "stderr.txt",
    }
    plan = make_plan(
        shell_job(f"echo {word}").model_copy(
            update={  # type: ignore[attr-defined]
                "directory": directory,
                "stdout_path": "stdout.txt",
                "stderr_path": "stderr.txt",
            }
        ),
        loaded,
    )
    record = engine.store.create(
        owner="alice",
        resource_id="local",
        spec={},
        effective_spec=effective,
        plan=plan.model_dump(mode="json", exclude={"script"}),
        script=plan.script,
        submitting=True,
    )
    CLOCK.offset = -attempted_ago
    try:
        engine.store.mark_submit_attempt(record.id)
    finally:
        CLOCK.offset = 0.0
    return record


class ShiftedClock:
    """time.time, moved by `offset` seconds while a test makes an old attempt."""

    offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


CLOCK = ShiftedClock()


def make_engine(data: Path) -> Engine:
    registry = ProfileRegistry.from_files([builtin_profile("local")])
    return Engine(
        registry=registry,
        store=JobStore(f"sqlite:///{data}/jobs.db", clock=CLOCK),
        backends=Backends(data),
    )


def test_start_up_leaves_a_fresh_attempt_and_resubmits_a_settled_one(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    fresh = attempted_record(engine, "fresh", attempted_ago=1.0)
    settled = attempted_record(engine, "settled", attempted_ago=engine.settle_time + 5)
    app = create_app(Settings(data_dir=tmp_path), engine=engine, run_poller=False)

    async def start_and_stop() -> None:
        async with app.router.lifespan_context(app):  # runs the start-up reconcile
            pass

    asyncio.run(start_and_stop())
    left = engine.store.get(fresh.id)
    assert left is not None
    assert left.state == JobState.NEW and left.native_id is None, left
    resubmitted = engine.store.get(settled.id)
    assert resubmitted is not None and resubmitted.native_id is not None, resubmitted
    done = wait_for(engine, settled.id, lambda r: r.state.final)
    assert done.state == JobState.COMPLETED
    assert engine.read_output(owner="alice", job_id=settled.id) == "settled\n"
