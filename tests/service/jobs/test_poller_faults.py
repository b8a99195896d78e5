"""A status cycle that fails for a reason that is no gateway error (the database gone for a
moment, a record the code cannot read) is logged and recorded, and tracking goes on: the
poller thread must not die and leave every job's state frozen until the server restarts."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

from iri_gateway.models.job import JobState
from iri_gateway.service.jobs.poller import CYCLE_ERROR, Poller
from iri_gateway.service.operations.store import PollEntry
from tests.service.jobs.test_engine_local import make_engine, shell_job


def test_a_failing_cycle_is_recorded_and_tracking_goes_on(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    record = engine.submit(owner="alice", resource_id="local", spec=shell_job("exit 0")).record  # type: ignore[arg-type]
    real_entries = engine.store.poll_entries
    failures = {"count": 0}
    seen_errors: list[str] = []
    error_seen = threading.Event()

    def flaky_entries(resource_ids: Sequence[str] | None = None) -> list[PollEntry]:
        """Fails until the test has seen the failure recorded (at least twice in a row)."""
        if failures["count"] < 2 or not error_seen.is_set():
            failures["count"] += 1
            raise RuntimeError("database is locked")
        return real_entries(resource_ids)

    engine.store.poll_entries = flaky_entries  # type: ignore[method-assign]
    poller = Poller(engine, fast=0.05)
    stop = threading.Event()
    thread = threading.Thread(target=poller.run, args=(stop, 0.02), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if CYCLE_ERROR in poller.errors:
                seen_errors.append(poller.errors[CYCLE_ERROR])
                error_seen.set()
            current = engine.store.get(record.id)
            assert current is not None
            if current.state.final:
                break
            time.sleep(0.01)
        assert thread.is_alive(), "the poller thread died"
    finally:
        stop.set()
        thread.join(timeout=5)
    assert failures["count"] >= 2
    assert "RuntimeError: database is locked" in seen_errors
    current = engine.store.get(record.id)
    assert current is not None and current.state == JobState.COMPLETED
    assert CYCLE_ERROR not in poller.errors, "a good cycle clears the recorded failure"
