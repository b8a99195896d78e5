"""Every answer names its request: the client's `X-Request-ID` (or `X-Correlation-ID`) when
well-formed, else a fresh id; the code serving the request sees the same id."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.service.operations.request_context import (
    accepted_request_id,
    request_id,
    trace_id,
)

pytestmark = pytest.mark.anyio


async def test_a_well_formed_request_id_is_echoed(client: httpx.AsyncClient) -> None:
    answer = await client.get("/health", headers={"X-Request-ID": "abc-123.def"})
    assert answer.headers["X-Request-ID"] == "abc-123.def"
    answer = await client.get("/health", headers={"X-Correlation-ID": "corr:77"})
    assert answer.headers["X-Request-ID"] == "corr:77"


@pytest.mark.parametrize(
    "offered", ["", "has space", "x" * 129, 'quote"d', "new\\nline", "ünïcode", "a;b"]
)
async def test_a_malformed_request_id_is_replaced_not_refused(
    client: httpx.AsyncClient, offered: str
) -> None:
    answer = await client.get("/health", headers={"X-Request-ID": offered.encode("utf-8")})
    assert answer.status_code == 200
    made = answer.headers["X-Request-ID"]
    assert made != offered and len(made) == 32 and int(made, 16) >= 0


async def test_every_answer_without_one_gets_a_fresh_id_even_errors(
    client: httpx.AsyncClient,
) -> None:
    first = await client.get("/api/v2/compute/status/local/nope")  # 401: no token
    second = await client.get("/nowhere")
    assert first.status_code == 401 and second.status_code == 404
    assert first.headers["X-Request-ID"] != second.headers["X-Request-ID"]


async def test_the_serving_code_sees_the_request_id(app: FastAPI) -> None:
    seen: list[str | None] = []

    @app.get("/test-only/request-id")
    def probe() -> dict[str, str]:  # a sync route: runs in the thread pool
        seen.append(request_id())
        return {}

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        await client.get("/test-only/request-id", headers={"X-Request-ID": "seen-1"})
    assert seen == ["seen-1"]
    assert request_id() is None  # outside a request


def test_no_trace_id_while_tracing_is_off() -> None:
    assert trace_id() is None
    assert accepted_request_id(None) != accepted_request_id(None)
