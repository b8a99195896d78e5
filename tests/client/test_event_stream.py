"""The SDK's wait() and watch() on the job event stream, against a real HTTP server in the
test speaking the stream's wire format (tests/support/event_server.py): few requests, no
change missed between subscribing and reading, reconnection with Last-Event-ID, fallback to
polling against a server without the stream, timeouts, and hostile streams."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

import pytest

from iri_gateway.client import (
    AsyncGatewayClient,
    GatewayClient,
    JobEvent,
    StreamBroken,
    StreamUnavailable,
    WaitTimeout,
)
from iri_gateway.models.job import JobState
from tests.support.event_server import EventServerState, event_server, until

STATUS = "/api/v2/compute/status/"
EVENTS = "/api/v2/compute/events"


def later(action: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=action, daemon=True)
    thread.start()
    return thread


def run_job_after_first_read(state: EventServerState, job_id: str) -> threading.Thread:
    def run() -> None:
        until(lambda: state.count(STATUS) >= 1)
        state.change(job_id, "active")
        state.change(job_id, "completed")

    return later(run)


def test_wait_on_the_stream_takes_two_requests() -> None:
    with event_server() as (url, state):
        state.add_job("j1")
        worker = run_job_after_first_read(state, "j1")
        seen: list[str] = []
        with GatewayClient(url, "t") as client:
            job = client.wait("local", "j1", timeout=30, on_update=lambda j: seen.append(j.state))
        worker.join()
        assert job.state == JobState.COMPLETED
        assert seen == ["queued", "active", "completed"]
        assert (state.count(EVENTS), state.count(STATUS)) == (1, 1)
        assert client.has_stream is True


def test_a_job_final_before_the_wait_is_read_once() -> None:
    with event_server() as (url, state):
        state.add_job("j2")
        state.change("j2", "failed", silent=True)
        with GatewayClient(url, "t") as client:
            assert client.wait("local", "j2", timeout=10).state == JobState.FAILED
        assert (state.count(EVENTS), state.count(STATUS)) == (1, 1)


def test_wait_times_out_on_the_stream() -> None:
    with event_server() as (url, state):
        state.add_job("j3", "active")
        started = time.monotonic()
        with GatewayClient(url, "t") as client, pytest.raises(WaitTimeout) as timed_out:
            client.wait("local", "j3", timeout=0.5)
        assert 0.4 < time.monotonic() - started < 5
        assert timed_out.value.job.state == JobState.ACTIVE


def test_a_plain_server_is_polled_and_said_once(caplog: pytest.LogCaptureFixture) -> None:
    with event_server() as (url, state):
        state.has_stream = False
        state.add_job("j4")

        def finish() -> None:
            until(lambda: state.count(STATUS) >= 3)
            state.change("j4", "completed")

        worker = later(finish)
        caplog.set_level(logging.DEBUG, logger="iri_gateway.client")
        with GatewayClient(url, "t") as client:
            job = client.wait("local", "j4", timeout=30, poll=0.01, max_poll=0.05)
            again = client.wait("local", "j4", timeout=30)
        worker.join()
        assert job.state == JobState.COMPLETED and again.state == JobState.COMPLETED
        assert state.count(EVENTS) == 1, "the missing stream is asked for once per client"
        assert state.count(STATUS) >= 4
        said = [r for r in caplog.records if "no job event stream" in r.getMessage()]
        assert len(said) == 1 and said[0].levelno == logging.DEBUG
        with GatewayClient(url, "t") as client, pytest.raises(StreamUnavailable, match="404"):
            client.watch()


def test_watch_reconnects_with_last_event_id_and_misses_nothing() -> None:
    with event_server() as (url, state):
        for name in ("a", "b", "c"):
            state.add_job(name)
        got: list[JobEvent] = []
        with GatewayClient(url, "t") as client:
            stream = client.watch(timeout=30)
            events = iter(stream)
            state.change("a", "active")
            got.append(next(events))
            state.change("b", "active")
            got.append(next(events))
            # The connection drops; changes happen while the client is away.
            state.drop()
            state.change("c", "active")
            state.change("a", "completed")
            got.append(next(events))
            got.append(next(events))
            stream.close()
        assert [(e.id, e.job_id, e.state) for e in got] == [
            (1, "a", "active"),
            (2, "b", "active"),
            (3, "c", "active"),
            (4, "a", "completed"),
        ]
        resumed = [h for p, h in state.requests if p == EVENTS]
        assert len(resumed) == 2
        assert "Last-Event-ID" not in resumed[0] and resumed[1]["Last-Event-ID"] == "2"
        assert got[3].job is not None and got[3].job.state == JobState.COMPLETED


@pytest.mark.parametrize("announce", [False, True])
def test_a_stream_that_saw_no_event_reconnects_without_losing_a_change(announce: bool) -> None:
    with event_server() as (url, state):
        state.announce = announce
        state.add_job("q")
        state.change("q", "queued")  # before the watch: the stream starts after it
        with GatewayClient(url, "t") as client, client.watch(timeout=30) as stream:
            events = iter(stream)
            state.drop()
            state.change("q", "active")  # while the watcher is away
            got = [next(events)]
        resumed = [h.get("Last-Event-ID") for p, h in state.requests if p == EVENTS]
    if announce:
        # The server named its start (id 1): the reconnection resumes there, nothing lost.
        assert resumed == [None, "1"]
        assert (got[0].type, got[0].id, got[0].state) == ("job", 2, "active")
    else:
        # No position to resume from: the watcher says changes may be missing.
        assert resumed == [None, None]
        assert got[0].type == "gap" and "read your jobs again" in (got[0].message or "")


def test_watch_filters_reach_the_server() -> None:
    with event_server() as (url, state):
        state.add_job("x")
        state.add_job("y")
        with (
            GatewayClient(url, "t") as client,
            client.watch("local", ["y"], ["completed"], timeout=30) as events,
        ):
            state.change("x", "completed")
            state.change("y", "active")
            state.change("y", "completed")
            first = next(iter(events))
        assert (first.job_id, first.state) == ("y", "completed")
        with GatewayClient(url, "t") as client, pytest.raises(ValueError, match="at most 100"):
            client.watch(job_ids=[str(n) for n in range(101)])


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"retry: 10\n\ndata: " + b"x" * (2 * 1024 * 1024) + b"\n\n", "longer than"),
        (b"retry: 10\n\n" + b"y" * (2 * 1024 * 1024), "longer than"),
        (b"retry: 10\n\nid: 1\nevent: job\ndata: {not json\n\n", "not JSON"),
        (b"retry: 10\n\nid: 1\nevent: job\ndata: [1]\n\n", "not an object"),
        (b"retry: 10\n\nid: one\nevent: job\ndata: {}\n\n", "integer id"),
        (b"retry: 10\n\nid: 99999999999999999999999\nevent: job\ndata: {}\n\n", "integer id"),
        (b'retry: 10\n\nid: 1\nevent: job\ndata: {"job": {"nope": 1}}\n\n', "not a job"),
    ],
)
def test_hostile_streams_are_refused_by_name(body: bytes, reason: str) -> None:
    with event_server() as (url, state):
        state.hostile = body
        with GatewayClient(url, "t") as client, pytest.raises(StreamBroken, match=reason):
            next(iter(client.watch(timeout=10)))  # the first bytes may hold it, or the next


def test_async_wait_and_watch() -> None:
    async def main(url: str, state: EventServerState) -> tuple[str, list[str]]:
        async with AsyncGatewayClient(url, "t") as client:
            worker = run_job_after_first_read(state, "aj")
            job = await client.wait("local", "aj", timeout=30)
            await asyncio.to_thread(worker.join)
            seen: list[str] = []
            state.add_job("aj")
            async with await client.watch(job_ids=["aj"], timeout=30) as stream:
                events = aiter(stream)
                state.change("aj", "active")
                seen.append(str((await anext(events)).state))
                state.drop()
                state.change("aj", "canceled")
                seen.append(str((await anext(events)).state))
            return job.state.value, seen

    with event_server() as (url, state):
        state.add_job("aj")
        final, seen = asyncio.run(main(url, state))
    assert final == "completed"
    assert seen == ["active", "canceled"]
