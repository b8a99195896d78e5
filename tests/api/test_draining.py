"""The drain's plumbing (issue 27, item 6): the stop signal noted before the server's own
handler, `/ready` saying `draining` at once, and a request the drain's end cancels answered
503 instead of uvicorn's bare 500. The whole drain of real `serve` processes is tested in
tests/cli/test_graceful_restarts.py and tests/integration/test_drain_cluster.py."""

from __future__ import annotations

import asyncio
import os
import signal
from types import FrameType
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.api.plumbing.draining import CutByDrain, Drain


def test_the_signal_is_noted_then_handed_to_the_servers_handler_and_put_back() -> None:
    got: list[int] = []

    def server(number: int, frame: FrameType | None) -> None:
        got.append(number)

    before = signal.signal(signal.SIGTERM, server)
    try:
        drain = Drain(7.0, clock=lambda: 100.0)
        assert drain.deadline() is None and not drain.draining
        drain.watch()
        os.kill(os.getpid(), signal.SIGTERM)
        assert got == [signal.SIGTERM], "the server's handler still gets the signal"
        assert drain.draining and drain.deadline() == 107.0
        drain.unwatch()
        assert signal.getsignal(signal.SIGTERM) is server
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.anyio
async def test_ready_says_draining_at_once(app: FastAPI, client: httpx.AsyncClient) -> None:
    before = await client.get("/ready")
    assert before.json()["status"] == "not ready"  # no lifespan here: not started
    app.state.drain.begin()
    answer = await client.get("/ready")
    assert answer.status_code == 503, answer.text
    body = answer.json()
    assert body["status"] == "draining" and "draining" in body["problems"][0], body


def cut_answer(draining: bool) -> tuple[list[dict[str, Any]], BaseException | None]:
    """What CutByDrain sends when the request under it is cancelled (the drain begun or
    not), and what it raised."""
    sent: list[dict[str, Any]] = []
    drain = Drain(3.0)
    if draining:
        drain.begin()

    async def slow(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(3600)

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/api/v2/compute/job/local",
        "headers": [(b"host", b"gateway")],
        "query_string": b"",
        "scheme": "http",
        "server": ("gateway", 80),
        "root_path": "",
    }

    async def run() -> BaseException | None:
        task = asyncio.ensure_future(CutByDrain(slow, drain)(scope, receive, send))
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            await task
        except BaseException as error:
            return error
        return None

    return sent, asyncio.run(run())


def test_a_request_cut_by_the_drain_is_answered_503_with_retry_after() -> None:
    sent, raised = cut_answer(draining=True)
    assert raised is None
    start = sent[0]
    assert start["status"] == 503
    headers = dict(start["headers"])
    assert headers[b"retry-after"] == b"1"
    assert headers[b"content-type"] == b"application/problem+json"
    assert b"drain_timeout of 3 s" in sent[1]["body"] and b"ask again" in sent[1]["body"]


def test_a_cancel_without_a_drain_is_not_turned_into_an_answer() -> None:
    sent, raised = cut_answer(draining=False)
    assert sent == [] and isinstance(raised, asyncio.CancelledError)
