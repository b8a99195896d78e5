"""The metrics' collectors and hooks (issue 27, item 1), without a server: scheduler commands
timed and their failures counted, the submitter's queue up and down (also for work that never
starts), the store's facts with the per-user task queue bounded, and the multiprocess files of
an ended worker forgotten. The scrapes of real servers: tests/api/test_metrics*.py."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from iri_gateway.errors import SchedulerUnavailableError
from iri_gateway.models.job import JobState, NativeStatus
from iri_gateway.schedulers.batch import JobChanges
from iri_gateway.service.operations.metrics import PrometheusMetrics
from iri_gateway.service.operations.metrics_facts import StoreFacts
from iri_gateway.service.operations.metrics_processes import VARIABLE, forget_ended
from iri_gateway.service.operations.store import JobStore
from iri_gateway.service.tasks.records import ACTIVE, PENDING, TaskStore


class Batch:
    """A batch system whose submit fails while `down`."""

    def __init__(self) -> None:
        self.down = False

    def submit(self, script: str, *, tag: str) -> str:
        if self.down:
            raise SchedulerUnavailableError(
                ["sbatch"], 1, "", "Unable to contact slurm controller", action="submit"
            )
        return "42"

    def statuses(self, native_ids: Collection[str]) -> dict[str, NativeStatus]:
        return {}

    def cancel(self, native_id: str) -> None: ...

    def find(self, tag: str) -> str | None:
        return None

    def update(self, native_id: str, changes: JobChanges) -> None: ...

    def requeue(self, native_id: str) -> str:
        return "requeued"


def sample(metrics: PrometheusMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_scheduler_commands_are_timed_and_failures_counted_by_resource() -> None:
    metrics = PrometheusMetrics()
    batch = Batch()
    measured = metrics.measured("perlmutter-gpu", batch)
    assert measured.submit("#!/bin/bash", tag="t") == "42"
    batch.down = True
    with pytest.raises(SchedulerUnavailableError):
        measured.submit("#!/bin/bash", tag="t")
    measured.statuses({"42"})
    labels = {"resource": "perlmutter-gpu"}
    count = "iri_gateway_scheduler_command_duration_seconds_count"
    assert sample(metrics, count, command="submit", **labels) == 2
    assert sample(metrics, count, command="statuses", **labels) == 1
    failures = "iri_gateway_scheduler_command_failures_total"
    assert (
        sample(metrics, failures, command="submit", error="SchedulerUnavailableError", **labels)
        == 1
    )
    assert sample(metrics, "iri_gateway_submissions_total", outcome="ok", **labels) == 1
    assert sample(metrics, "iri_gateway_submissions_total", outcome="failed", **labels) == 1


def test_the_submitter_queue_goes_up_and_down_even_for_work_that_never_starts() -> None:
    metrics = PrometheusMetrics()
    depth = "iri_gateway_submitter_queue_depth"
    busy, release = threading.Event(), threading.Event()

    def hold() -> str:
        busy.set()
        release.wait(10)
        return "held"

    pool = ThreadPoolExecutor(max_workers=1)
    first = metrics.queued("polaris", pool.submit, hold)
    assert busy.wait(10)
    second = metrics.queued("polaris", pool.submit, lambda: "second")
    dropped = metrics.queued("polaris", pool.submit, lambda: "dropped")
    assert sample(metrics, depth, resource="polaris") == 2  # the first runs, two wait
    assert dropped.cancel()
    assert sample(metrics, depth, resource="polaris") == 1
    release.set()
    assert first.result(10) == "held" and second.result(10) == "second"
    pool.shutdown()
    assert sample(metrics, depth, resource="polaris") == 0


def test_store_facts_count_jobs_and_bound_the_task_queue_per_user(tmp_path: Path) -> None:
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    try:
        for state in (JobState.COMPLETED, JobState.COMPLETED, JobState.FAILED, None):
            record = store.create(
                owner="alice", resource_id="local", spec={}, effective_spec={}, plan={}, script=""
            )
            if state is not None:
                store.transition(record.id, state, "done")
        tasks = TaskStore(store)
        for owner, count in (("carol", 3), ("bob", 2), ("dave", 1), ("erin", 1)):
            for _ in range(count):
                tasks.create(owner, {"command": "cp"}, replica_id=None)
        tasks.create("carol", {"command": "cp"}, replica_id=None, status=ACTIVE)
        found = {
            (family.name, tuple(sorted(s.labels.items()))): s.value
            for family in StoreFacts(store, task_users=2, now=lambda: 0.0).collect()
            for s in family.samples
        }
    finally:
        store.close()
    jobs = {labels: v for (name, labels), v in found.items() if name == "iri_gateway_jobs"}
    assert jobs == {
        (("resource", "local"), ("state", "completed")): 2,
        (("resource", "local"), ("state", "failed")): 1,
        (("resource", "local"), ("state", "new")): 1,
    }
    queue = {
        labels: v for (name, labels), v in found.items() if name == "iri_gateway_task_queue_depth"
    }
    assert queue == {  # the two users with most named, every other user added up as ""
        (("state", ACTIVE), ("user", "carol")): 1,
        (("state", PENDING), ("user", "carol")): 3,
        (("state", PENDING), ("user", "bob")): 2,
        (("state", PENDING), ("user", "")): 2,
    }
    assert found[("iri_gateway_store_up", ())] == 1


def test_an_unreachable_store_is_store_up_zero_not_a_failed_scrape(tmp_path: Path) -> None:
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    store.close()
    (tmp_path / "jobs.db").unlink()
    (tmp_path / "jobs.db").mkdir()  # no database can be opened there any more
    names = [
        (f.name, [s.value for s in f.samples])
        for f in StoreFacts(store, task_users=1, now=lambda: 0.0).collect()
    ]
    assert names == [("iri_gateway_store_up", [0.0])]


def test_an_ended_worker_keeps_its_counts_and_loses_its_live_gauges(tmp_path: Path) -> None:
    """Two real processes write their files as workers do; one has ended."""
    program = (
        "from iri_gateway.service.operations.metrics import PrometheusMetrics\n"
        "m = PrometheusMetrics()\n"
        "m.request(operation='getLiveness', method='GET', status=200, seconds=0.01)\n"
        "m.db_pool.labels('size').set(3)\n"
    )
    env = {**os.environ, VARIABLE: str(tmp_path)}
    ended = subprocess.Popen([sys.executable, "-c", program], env=env)
    assert ended.wait(timeout=60) == 0
    live = subprocess.Popen(
        [sys.executable, "-c", program + "import sys; sys.stdin.read()\n"],
        env=env,
        stdin=subprocess.PIPE,
    )
    try:

        def read(name: str, **labels: str) -> float | None:
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=str(tmp_path))  # type: ignore[no-untyped-call]
            return registry.get_sample_value(name, labels)

        requests = "iri_gateway_http_requests_total"
        labels = {"operation": "getLiveness", "method": "GET", "status": "200"}
        deadline = time.monotonic() + 60
        while read(requests, **labels) != 2:
            assert time.monotonic() < deadline, "the live process never wrote its files"
            time.sleep(0.2)
        assert read("iri_gateway_database_pool_connections", state="size") == 6
        assert forget_ended(tmp_path) == [ended.pid]  # the live one is kept
        assert read(requests, **labels) == 2  # answered requests stay answered
        assert read("iri_gateway_database_pool_connections", state="size") == 3
    finally:
        live.communicate(b"", timeout=30)
