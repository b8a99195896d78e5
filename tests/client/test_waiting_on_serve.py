"""wait() and watch() against a real `iri-gateway serve` with the job event stream: a wait
costs a couple of requests where polling costs many, and a watcher that loses its server
(a restart on the same port and store) resumes with Last-Event-ID and misses nothing."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx

from iri_gateway.client import GatewayClient, JobEvent
from iri_gateway.models.job import JobState
from tests.conftest import UNHURRIED, Server, token_works
from tests.support.serve import free_port, issue_token, running_serve


def shell(command: str) -> dict[str, Any]:
    return {"executable": "/bin/sh", "arguments": ["-c", command]}


class Counted:
    """Requests a client sends, counted by an httpx event hook."""

    def __init__(self, client: GatewayClient) -> None:
        self.count = 0
        client._http.event_hooks["request"] = [self.hook]

    def hook(self, request: httpx.Request) -> None:
        self.count += 1


def test_wait_on_the_stream_costs_far_fewer_requests_than_polling(server: Server) -> None:
    with (
        GatewayClient(server.url, server.token) as streamed,
        GatewayClient(server.url, server.token) as polled,
    ):
        first = streamed.submit("local", shell("sleep 3"), project="proj1")
        second = polled.submit("local", shell("sleep 3"), project="proj1")
        on_stream, by_polling = Counted(streamed), Counted(polled)
        results: list[JobState] = []
        other = threading.Thread(
            target=lambda: results.append(polled.wait("local", second.id, use_events=False).state)
        )
        other.start()
        done = streamed.wait("local", first.id, timeout=120)
        other.join(120)
    assert done.state == JobState.COMPLETED and results == [JobState.COMPLETED]
    assert streamed.has_stream is True
    assert on_stream.count <= 3, "one stream, one read (a reconnection at most)"
    assert by_polling.count >= 3 * on_stream.count


def test_watch_resumes_across_a_restart_and_misses_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    token = issue_token(data, "alice", "proj1")
    port = free_port()
    seen: list[JobEvent] = []
    with running_serve(data, port=port, extra_env=UNHURRIED, ready=token_works(token)) as first:
        client = GatewayClient(first.url, token)
        stream = client.watch("local", timeout=120)  # this store's only job, from its start
        job = client.submit("local", shell("sleep 4"), project="proj1")
        for event in stream:  # the watcher has a position: the job's start
            seen.append(event)
            if event.state == JobState.ACTIVE.value:
                break
    # The server is gone; the watcher reconnects to the next one, on the same port and store.
    with running_serve(data, port=port, extra_env=UNHURRIED, ready=token_works(token)):
        for event in stream:
            seen.append(event)
            if event.job is not None and event.job.final:
                break
        stream.close()
        assert {e.job_id for e in seen} == {job.id}
        replay: list[JobEvent] = []
        with client.watch("local", last_event_id=0, timeout=30) as again:
            for event in again:
                replay.append(event)
                if event.id >= seen[-1].id:
                    break
        client.close()
    assert stream.cursor.connections >= 2, "the watcher reconnected"
    assert [e.id for e in seen] == sorted({e.id for e in seen}), "in order, none twice"
    assert all(e.type != "gap" for e in seen + replay)
    assert [(e.id, e.state) for e in seen] == [
        (e.id, e.state) for e in replay if e.id >= seen[0].id
    ], "every event the log holds since the watch began, across the restart"
