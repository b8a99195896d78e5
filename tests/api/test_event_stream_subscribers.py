"""A thousand event streams on one real `iri-gateway serve` (issue 28: one user must not
slow it for everyone, and memory stays bounded whatever the number of streams).

Two users hold 500 streams each (raw HTTP/1.1 connections from one asyncio loop, as many
browsers or SDK clients would): one job of alice's reaches every one of her 500 streams and
none of bob's; the serve's resident memory grows by a bounded amount per stream; the
process's bound on streams (`events_streams`) refuses the next one with a 503 that says why
and when to come back, and gives the slots back when the streams end.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.transfer_helpers import memory_kib
from tests.support.serve import RunningServe, issue_token, running_serve

API = "/api/v2"
PER_USER = 500
USERS = ("alice", "bob")
TOTAL = PER_USER * len(USERS)

PER_STREAM_KIB = 128
"""The bound on the serve's memory per open stream. What a stream holds is its connection
(uvicorn's protocol object, the transport's buffers), its response generator and a few
asyncio objects: about 43 KiB measured on this machine (docs/benchmarks.md). The events
themselves are held once per process (the hub's window), not per stream, so the figure does
not grow with traffic; 128 KiB leaves three times the measured room for the allocator's
rounding and another Python build, while a stream that copied the window (4,096 events,
several KiB each) or kept a thread would be far past it."""


@dataclass
class Streams:
    """Raw SSE connections to one serve; what each received."""

    host: str
    port: int
    opened: int = 0
    received: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)
    """Per stream: its user, and the events' data it received, in order."""
    refused: list[bytes] = field(default_factory=list)

    def of(self, user: str) -> list[list[dict[str, Any]]]:
        return [events for owner, events in self.received if owner == user]

    async def open(self, token: str, user: str, all_open: asyncio.Event, want: int) -> None:
        events: list[dict[str, Any]] = []
        self.received.append((user, events))
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            writer.write(
                (
                    f"GET {API}/compute/events HTTP/1.1\r\nHost: {self.host}\r\n"
                    f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
                ).encode()
            )
            await writer.drain()
            status = await reader.readline()
            if b" 200 " not in status:
                self.refused.append(status + await reader.read(4096))
                return
            while line := await reader.readline():
                if line.startswith(b"retry:"):
                    self.opened += 1
                    if self.opened == want:
                        all_open.set()
                elif line.startswith(b"data:"):
                    events.append(json.loads(line[5:]))
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServe, Path]]:
    data = tmp_path_factory.mktemp("many-streams") / "data"
    env = {
        "IRI_GATEWAY_EVENTS_STREAMS": str(TOTAL),
        "IRI_GATEWAY_EVENTS_STREAMS_PER_USER": str(PER_USER),
        "IRI_GATEWAY_EVENTS_HEARTBEAT": "60",
        "IRI_GATEWAY_POLL_FAST": "0.2",
    }
    with running_serve(data, extra_env=env) as served:
        yield served, data


def test_a_thousand_streams_get_their_users_events_in_bounded_memory(
    serve: tuple[RunningServe, Path],
) -> None:
    served, data = serve
    tokens = {user: issue_token(data, user, "proj1") for user in USERS}
    url = httpx.URL(served.url)
    pid = served.process.pid

    async def run() -> tuple[Streams, int, int, httpx.Response]:
        streams = Streams(url.host, url.port or 80)
        # Warm-up: the first streams load what a stream needs once per process (the route,
        # the hub's thread, the thread pool), which is not memory per stream.
        warm_open = asyncio.Event()
        warm = [
            asyncio.create_task(streams.open(tokens["alice"], "warm", warm_open, 20))
            for _ in range(20)
        ]
        await asyncio.wait_for(warm_open.wait(), 60)
        for task in warm:
            task.cancel()
        await asyncio.gather(*warm, return_exceptions=True)
        await _until(lambda: _can_open(served.url, tokens["alice"]), 30)
        streams.opened, streams.received = 0, []
        before = memory_kib(pid)["VmRSS"]

        all_open = asyncio.Event()
        tasks = [
            asyncio.create_task(streams.open(tokens[user], user, all_open, TOTAL))
            for user in USERS
            for _ in range(PER_USER)
        ]
        await asyncio.wait_for(all_open.wait(), 120)
        assert streams.refused == [], streams.refused[:3]
        await asyncio.sleep(0.5)  # the serve's last writes settle
        during = memory_kib(pid)["VmRSS"]

        async with httpx.AsyncClient(timeout=60) as client:
            one_more = await client.get(
                f"{served.url}{API}/compute/events",
                headers={"Authorization": f"Bearer {tokens['bob']}"},
            )
            launched = await client.post(
                f"{served.url}{API}/compute/job/local",
                json={"executable": "/bin/true"},
                headers={
                    "Authorization": f"Bearer {tokens['alice']}",
                    "X-IRI-Facility-Project": "proj1",
                },
            )
        assert launched.status_code == 200, launched.text
        job_id = launched.json()["id"]

        def every_alice_stream_saw_the_end() -> bool:
            return all(
                any(e.get("job_id") == job_id and e.get("state") == "completed" for e in got)
                for got in streams.of("alice")
            )

        await _until(every_alice_stream_saw_the_end, 60)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return streams, before, during, one_more

    streams, before, during, one_more = asyncio.run(run())

    grown = during - before
    assert grown <= PER_STREAM_KIB * TOTAL, (
        f"{TOTAL} streams grew the serve by {grown} KiB ({grown / TOTAL:.1f} KiB each; "
        f"bound {PER_STREAM_KIB})"
    )
    assert one_more.status_code == 503, one_more.text
    assert one_more.headers["content-type"].startswith("application/problem+json")
    assert "events_streams" in one_more.json()["detail"]
    assert int(one_more.headers["Retry-After"]) > 0

    alices, bobs = streams.of("alice"), streams.of("bob")
    assert len(alices) == len(bobs) == PER_USER
    first = [(e["id"], e["state"]) for e in alices[0]]
    assert first[0][1] == "new" and first[-1][1] == "completed", first
    for got in alices:
        assert [(e["id"], e["state"]) for e in got] == first, "each stream: the same, once"
        assert {e["job_id"] for e in got} == {alices[0][0]["job_id"]}, "only her job"
    assert all(got == [] for got in bobs), "bob's 500 streams saw none of alice's events"

    # The slots are back once the streams ended: a new stream opens.
    end = time.monotonic() + 30
    while not _can_open(served.url, tokens["bob"]):
        assert time.monotonic() < end, "the streams' slots did not come back"
        time.sleep(0.1)


def _can_open(url: str, token: str) -> bool:
    """Whether a stream opens now (the process has a slot free), closing it at once."""
    with (
        httpx.Client(timeout=10) as client,
        client.stream(
            "GET", f"{url}{API}/compute/events", headers={"Authorization": f"Bearer {token}"}
        ) as answer,
    ):
        return answer.status_code == 200


async def _until(condition: Callable[[], bool], timeout: float) -> None:
    """Until `condition()` holds (run off the loop: it may do I/O), or fail."""
    end = time.monotonic() + timeout
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < end, f"not within {timeout} s"
        await asyncio.sleep(0.1)
