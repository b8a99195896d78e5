"""The SDK honours the gateway's Retry-After on 503 (issue 11, item 5), within a bound.

Offline with respx, as tests/client/test_sdk.py: the gateway's answers written as the API sends them
during a scheduler outage (503 problem+json with Retry-After). The real server's answers are
tested in tests/integration/test_scheduler_outage.py.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest
import respx

from iri_gateway.client import AsyncGatewayClient, GatewayClient, ServerError
from iri_gateway.client.calls import RETRY_AFTER_LIMIT, retry_pause

URL = "http://gateway.test"
API = f"{URL}/api/v2"
JOB = {"id": "j1", "status": {"state": "queued", "time": 1.0}}
OUTAGE = {
    "type": "about:blank",
    "status": 503,
    "title": "Service Unavailable",
    "detail": "submission failed: `sbatch --parsable` exited 1: sbatch: error: Batch job "
    "submission failed: Unable to contact slurm controller (connect failure)",
}


def unavailable(retry_after: str | None) -> httpx.Response:
    headers = {"Content-Type": "application/problem+json"}
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    return httpx.Response(503, json=OUTAGE, headers=headers)


@respx.mock
def test_submit_waits_as_long_as_the_gateway_asks() -> None:
    sleeps: list[float] = []
    route = respx.post(f"{API}/compute/job/local")
    route.side_effect = [unavailable("7"), unavailable("3"), httpx.Response(200, json=JOB)]
    with GatewayClient(URL, "tok", sleep=sleeps.append) as client:
        assert client.submit("local", {"executable": "/bin/true"}).id == "j1"
    assert sleeps == [7.0, 3.0]
    keys = {call.request.headers["Idempotency-Key"] for call in route.calls}
    assert len(keys) == 1, "every attempt is the same submission"


@respx.mock
def test_async_client_waits_as_long_as_the_gateway_asks() -> None:
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async def scenario() -> str:
        async with AsyncGatewayClient(URL, "tok", sleep=sleep) as client:
            await client.cancel("local", "j1")
            return "done"

    respx.delete(f"{API}/compute/cancel/local/j1").side_effect = [
        unavailable("4"),
        httpx.Response(204),
    ]
    assert asyncio.run(scenario()) == "done"
    assert sleeps == [4.0]


@respx.mock
def test_an_outage_longer_than_the_retries_ends_as_a_server_error_with_its_words() -> None:
    sleeps: list[float] = []
    respx.post(f"{API}/compute/job/local").respond(503, json=OUTAGE, headers={"Retry-After": "5"})
    with (
        GatewayClient(URL, "tok", sleep=sleeps.append, retries=2) as client,
        pytest.raises(ServerError) as caught,
    ):
        client.submit("local", {"executable": "/bin/true"})
    assert sleeps == [5.0, 5.0]
    assert caught.value.status == 503
    assert "Unable to contact slurm controller" in caught.value.detail


@pytest.mark.parametrize(
    ("header", "pause"),
    [
        ("12", 12.0),
        ("0", 0.0),
        ("86400", RETRY_AFTER_LIMIT),  # a day: bounded
        ("soon", 1.0),  # unusable: the growing backoff (attempt 1)
        ("-3", 1.0),
        (None, 1.0),
    ],
)
def test_retry_pause_reads_delay_seconds_within_a_bound(header: str | None, pause: float) -> None:
    assert retry_pause(unavailable(header), attempt=1) == pause


def test_retry_pause_reads_an_http_date() -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25.0 <= retry_pause(unavailable(when), attempt=0) <= 30.0
    past = format_datetime(datetime.now(UTC) - timedelta(hours=1), usegmt=True)
    assert retry_pause(unavailable(past), attempt=0) == 0.0
