"""The SDK and the CLI client and the gateway's 429 (a request rate used up).

Against a real serve (20 reads per 20 s): the SDK waits the server's `Retry-After` and is
served; without retries it raises `TooManyRequests` carrying the problem. Offline (respx, as
tests/cli/test_cli_client.py): the CLI retries a 429 a bounded number of times, then prints the
problem (which names the limit and when to try again) and exits 1.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import respx

from iri_gateway.client import GatewayClient, TooManyRequests
from tests.support.serve import issue_token, running_serve

BASE = "http://gateway.test"


def test_the_sdk_waits_retry_after_then_is_served(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    alice = issue_token(data, "alice", "proj1")
    env = {"IRI_GATEWAY_READ_RATE": "1", "IRI_GATEWAY_RATE_WINDOW": "3"}
    with running_serve(data, extra_env=env) as served:
        refused = None
        with GatewayClient(served.url, alice, retries=0) as impatient:
            for _ in range(20):
                try:
                    impatient.capabilities("local")
                except TooManyRequests as error:
                    refused = error
                    break
        assert refused is not None, "no 429 after 20 reads"
        assert refused.status == 429 and "try again in" in refused.detail
        slept: list[float] = []

        def sleep(seconds: float) -> None:
            slept.append(seconds)
            time.sleep(seconds)

        with GatewayClient(served.url, alice, retries=3, sleep=sleep) as patient:
            assert patient.capabilities("local").resource == "local"
        assert slept and all(1 <= pause <= 4 for pause in slept), slept


def test_the_cli_prints_the_problem_when_it_gives_up() -> None:
    from typer.testing import CliRunner

    from iri_gateway.cli.app import app

    problem = {
        "type": "about:blank",
        "status": 429,
        "title": "Too Many Requests",
        "detail": "alice made 100 read requests in the last 10 s, the most allowed "
        "(read_rate: 10 per second, 100 per 10 s, shared by every gateway process): "
        "try again in 1 s",
        "instance": f"{BASE}/api/v2/compute/status/local/j1",
        "limit": "read_rate",
        "limit_value": 10.0,
        "window_seconds": 10.0,
        "used": 100.0,
        "retry_after": 1,
    }
    with respx.mock(base_url=BASE) as mock:
        route = mock.get("/api/v2/compute/status/local/j1").mock(
            return_value=httpx.Response(
                429,
                json=problem,
                headers={"Retry-After": "1", "Content-Type": "application/problem+json"},
            )
        )
        shown = CliRunner().invoke(app, ["status", "j1", "-r", "local", "--server", BASE])
    assert shown.exit_code == 1, shown.output
    assert route.call_count == 4  # the first request and three retries, a second apart
    assert "429 Too Many Requests: alice made 100 read requests" in shown.output
    assert "try again in 1 s" in shown.output
