"""The PSI/J executor's status callbacks driven by the job event stream: one stream for all
the jobs an executor follows, the jobs read once after subscribing, and polling against a
server without the stream; against a real HTTP server speaking the stream's format
(tests/support/event_server.py)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from psij import Job, JobExecutor, JobSpec, JobState, JobStatus

from iri_gateway.psij_executor import IriExecutorConfig, IriJobExecutor
from tests.conftest import Server
from tests.support.event_server import event_server, until

EVENTS = "/api/v2/compute/events"
JOBS = "/api/v2/compute/status/local"
WAIT = timedelta(seconds=30)


def attached(
    url: str, names: list[str], poll: float = 60.0
) -> tuple[IriJobExecutor, dict[str, list[str]]]:
    config = IriExecutorConfig(resource="local", token="t", poll_interval=poll)
    executor = JobExecutor.get_instance("iri", url=url, config=config)
    assert isinstance(executor, IriJobExecutor)
    seen: dict[str, list[str]] = {name: [] for name in names}
    lock = threading.Lock()

    def callback(job: Job, status: JobStatus) -> None:
        with lock:
            seen[job.native_id or ""].append(str(status.state))

    executor.set_job_status_callback(callback)
    for name in names:
        executor.attach(Job(), name)
    return executor, seen


def test_one_stream_drives_every_jobs_callbacks() -> None:
    with event_server() as (url, state):
        names = ["a", "b", "c"]
        for name in names:
            state.add_job(name)
        # A poll interval of a minute: only the stream can report these in time.
        executor, seen = attached(url, names)
        until(lambda: state.exactly(JOBS) >= 1 and state.count(EVENTS) == 1)
        state.change("a", "active")
        state.change("b", "active")
        state.change("a", "completed")
        state.change("b", "failed")
        state.change("c", "canceled")
        until(lambda: all(len(seen[n]) >= 2 for n in names))
        assert seen == {
            "a": ["QUEUED", "ACTIVE", "COMPLETED"],
            "b": ["QUEUED", "ACTIVE", "FAILED"],
            "c": ["QUEUED", "CANCELED"],
        }
        assert executor.streaming is True
        assert state.count(EVENTS) == 1, "one stream per executor, not per job"
        assert state.exactly(JOBS) == 1, "read once after subscribing, then only events"
        until(lambda: executor._poller is None)


def test_a_server_without_the_stream_is_polled(caplog: pytest.LogCaptureFixture) -> None:
    with event_server() as (url, state):
        state.has_stream = False
        state.add_job("p")
        caplog.set_level("DEBUG", logger="iri_gateway.psij_bridge.executor")
        executor, seen = attached(url, ["p"], poll=0.05)
        until(lambda: state.exactly(JOBS) >= 2)
        state.change("p", "completed")
        until(lambda: "COMPLETED" in seen["p"])
        assert executor.streaming is False
        assert any("polling instead" in r.getMessage() for r in caplog.records)
        assert state.count(EVENTS) == 1


def test_on_a_real_serve_the_stream_reports_what_polling_every_minute_could_not(
    server: Server,
) -> None:
    config = IriExecutorConfig(
        resource="local", token=server.token, project="proj1", poll_interval=60.0
    )
    executor = JobExecutor.get_instance("iri", url=server.url, config=config)
    assert isinstance(executor, IriJobExecutor)
    jobs = [Job(JobSpec("/bin/sh", ["-c", f"sleep 1; exit {code}"])) for code in (0, 4)]
    for job in jobs:
        executor.submit(job)
    ended = [job.wait(timeout=WAIT) for job in jobs]
    assert [status.state if status else None for status in ended] == [
        JobState.COMPLETED,
        JobState.FAILED,
    ]
    assert executor.streaming is True
