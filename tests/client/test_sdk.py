"""The Python SDK (`iri_gateway.client`): every call, errors, retries, wait; sync and async.

Offline with respx (the gateway's answers written as the API documents them), then the async
client against a real `iri-gateway serve` (the `server` fixture of tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

import httpx
import pytest
import respx
from rich.console import Console

from iri_gateway.client import (
    AsyncGatewayClient,
    Conflict,
    ConnectionFailed,
    Forbidden,
    GatewayClient,
    GatewayClientError,
    InvalidRequest,
    NotFound,
    ServerError,
    Unauthorized,
    WaitTimeout,
)
from iri_gateway.models.job import JobState
from tests.conftest import Server

URL = "http://gateway.test"
API = f"{URL}/api/v2"
SPEC = {"executable": "/bin/true"}


def job(state: str = "queued", job_id: str = "j1", **status: Any) -> dict[str, Any]:
    return {"id": job_id, "status": {"state": state, "time": 1.0, **status}}


class FakeClock:
    """Time that passes only when the client sleeps: waits are tested without waiting."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def client(clock: FakeClock) -> GatewayClient:
    return GatewayClient(URL, "tok", sleep=clock.sleep, clock=clock)


@pytest.fixture
def aclient(clock: FakeClock) -> AsyncGatewayClient:
    return AsyncGatewayClient(URL, "tok", sleep=clock.asleep, clock=clock)


@respx.mock
def test_every_call_sends_what_the_api_expects(client: GatewayClient) -> None:
    submit = respx.post(f"{API}/compute/job/local").respond(200, json=job())
    status = respx.get(f"{API}/compute/status/local/j1").respond(200, json=job("active"))
    listed = respx.post(f"{API}/compute/status/local").respond(200, json=[job(), job()])
    cancel = respx.delete(f"{API}/compute/cancel/local/j1").respond(204)
    caps = respx.get(f"{API}/compute/capabilities/local").respond(
        404, json={"status": 404, "title": "Not Found", "detail": "unknown resource"}
    )

    assert client.submit("local", SPEC, idempotency_key="k1", project="p1").id == "j1"
    sent = submit.calls.last.request
    assert sent.headers["Idempotency-Key"] == "k1"
    assert sent.headers["X-IRI-Facility-Project"] == "p1"
    assert sent.headers["Authorization"] == "Bearer tok"
    assert sent.content == b'{"executable":"/bin/true"}'
    assert client.status("local", "j1").state == JobState.ACTIVE
    assert status.calls.last.request.url.params.get("include_spec") is None
    assert [j.id for j in client.jobs("local", historical=True)] == ["j1", "j1"]
    assert listed.calls.last.request.url.params["historical"] == "true"
    client.cancel("local", "j1")
    assert cancel.called
    with pytest.raises(NotFound) as caught:
        client.capabilities("local")
    assert caught.value.detail == "unknown resource" and caps.call_count == 1


@respx.mock
def test_a_submission_without_a_key_gets_one(client: GatewayClient) -> None:
    route = respx.post(f"{API}/compute/job/local").respond(200, json=job())
    client.submit("local", SPEC)
    client.submit("local", SPEC)
    keys = [call.request.headers["Idempotency-Key"] for call in route.calls]
    assert len(set(keys)) == 2 and all(len(k) == 36 for k in keys), "a fresh key per job"


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, InvalidRequest),
        (422, InvalidRequest),
        (401, Unauthorized),
        (403, Forbidden),
        (404, NotFound),
        (409, Conflict),
        (500, ServerError),
        (418, GatewayClientError),
    ],
)
@respx.mock
def test_errors_are_typed_and_carry_the_problem(
    client: GatewayClient, status: int, kind: type[GatewayClientError]
) -> None:
    respx.post(f"{API}/compute/plan/local").respond(
        status,
        json={
            "type": "https://iri.example/problems/x",
            "status": status,
            "title": "T",
            "detail": "what went wrong",
            "instance": f"{API}/compute/plan/local",
            "invalid_params": [{"name": "resources.node_count", "reason": "too many"}],
        },
    )
    with pytest.raises(kind) as caught:
        client.plan("local", SPEC)
    error = caught.value
    assert type(error) is kind
    assert (error.status, error.title, error.detail) == (status, "T", "what went wrong")
    assert error.invalid_params == [{"name": "resources.node_count", "reason": "too many"}]
    assert error.type == "https://iri.example/problems/x"
    assert "resources.node_count: too many" in str(error)


@respx.mock
def test_a_lost_answer_is_retried_with_the_same_key(
    client: GatewayClient, clock: FakeClock
) -> None:
    route = respx.post(f"{API}/compute/job/local")
    route.side_effect = [
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("no answer"),
        httpx.Response(503),
        httpx.Response(200, json=job()),
    ]
    assert client.submit("local", SPEC).id == "j1"
    keys = {call.request.headers["Idempotency-Key"] for call in route.calls}
    assert route.call_count == 4 and len(keys) == 1, "every attempt is the same submission"
    assert clock.sleeps == [0.5, 1.0, 2.0], "growing pauses between attempts"


@respx.mock
def test_retries_run_out_as_connection_failed(client: GatewayClient) -> None:
    route = respx.get(f"{API}/compute/status/local/j1")
    route.side_effect = httpx.ConnectError("refused")
    with pytest.raises(ConnectionFailed) as caught:
        client.status("local", "j1")
    assert caught.value.status == 0 and "refused" in caught.value.detail
    assert route.call_count == 1 + client.retries


@respx.mock
def test_wait_grows_its_interval_and_times_out_cleanly(
    client: GatewayClient, clock: FakeClock
) -> None:
    respx.get(f"{API}/compute/status/local/j1").respond(200, json=job("active"))
    with pytest.raises(WaitTimeout) as caught:
        client.wait("local", "j1", timeout=3, poll=0.2, max_poll=1.0, use_events=False)
    assert caught.value.job.state == JobState.ACTIVE, "the last status seen comes with it"
    assert clock.sleeps[:4] == pytest.approx([0.2, 0.3, 0.45, 0.675])
    assert max(clock.sleeps) <= 1.0 and sum(clock.sleeps) == pytest.approx(3.0)


@respx.mock
def test_wait_with_progress_draws_the_states(client: GatewayClient) -> None:
    route = respx.get(f"{API}/compute/status/local/j1")
    route.side_effect = [
        httpx.Response(200, json=job("queued")),
        httpx.Response(200, json=job("active", message="RUNNING")),
        httpx.Response(200, json=job("completed", exit_code=0)),
    ]
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=100)
    seen: list[JobState] = []
    done = client.wait(
        "local", "j1", progress=console, on_update=lambda j: seen.append(j.state), use_events=False
    )
    assert done.state == JobState.COMPLETED and done.exit_code == 0
    assert seen == [JobState.QUEUED, JobState.ACTIVE, JobState.COMPLETED]
    drawn = screen.getvalue()
    assert "job j1: queued\n" in drawn and "job j1: active (RUNNING)\n" in drawn
    assert "job j1: completed\n" in drawn


@respx.mock
def test_output_pages_through_view_tasks(client: GatewayClient) -> None:
    respx.get(f"{API}/compute/status/local/j1").respond(
        200,
        json={
            **job("completed"),
            "status": {
                "state": "completed",
                "meta_data": {"directory": "/jobs/j1", "stdout_path": "stdout.txt"},
            },
        },
    )
    views = respx.post(f"{API}/filesystem/view/local")
    views.side_effect = [
        httpx.Response(200, json={"task_id": "t1"}),
        httpx.Response(200, json={"task_id": "t2"}),
    ]
    tasks = respx.get(url__regex=rf"{API}/task/t\d")
    tasks.side_effect = [
        httpx.Response(
            200,
            json={
                "status": "completed",
                "result": {
                    "output": {
                        "content": "abc",
                        "start_position": 0,
                        "end_position": 3,
                        "file_size": 5,
                    }
                },
            },
        ),
        httpx.Response(
            200,
            json={
                "status": "completed",
                "result": {
                    "output": {
                        "content": "de",
                        "start_position": 3,
                        "end_position": 5,
                        "file_size": 5,
                    }
                },
            },
        ),
    ]
    assert client.output("local", "j1") == "abcde"
    bodies = [call.request.content for call in views.calls]
    assert b'"path":"/jobs/j1/stdout.txt"' in bodies[0] and b'"offset":3' in bodies[1]


@respx.mock
def test_the_async_client_does_the_same(aclient: AsyncGatewayClient, clock: FakeClock) -> None:
    route = respx.post(f"{API}/compute/job/local")
    route.side_effect = [httpx.ConnectError("refused"), httpx.Response(200, json=job())]
    statuses = respx.get(f"{API}/compute/status/local/j1")
    statuses.side_effect = [
        httpx.Response(200, json=job("active")),
        httpx.Response(200, json=job("failed", exit_code=3)),
    ]
    respx.post(f"{API}/compute/placement").respond(
        422,
        json={
            "status": 422,
            "title": "Unprocessable",
            "detail": "bad",
            "invalid_params": [{"name": "roles[0].name", "reason": "lower case"}],
        },
    )

    async def scenario() -> None:
        async with aclient:
            submitted = await aclient.submit("local", SPEC, project="p1")
            assert submitted.id == "j1"
            done = await aclient.wait("local", "j1", timeout=10, use_events=False)
            assert done.state == JobState.FAILED and done.exit_code == 3
            with pytest.raises(InvalidRequest) as caught:
                await aclient.placement(SPEC)
            assert caught.value.invalid_params[0]["name"] == "roles[0].name"

    asyncio.run(scenario())
    keys = {call.request.headers["Idempotency-Key"] for call in route.calls}
    assert route.call_count == 2 and len(keys) == 1
    assert clock.sleeps[0] == 0.5


def test_token_and_server_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRI_GATEWAY_URL", "http://from-env:9/")
    monkeypatch.setenv("IRI_GATEWAY_TOKEN", "env-token")
    with respx.mock:
        route = respx.get("http://from-env:9/api/v2/compute/status/local/j1").respond(
            200, json=job()
        )
        with GatewayClient() as gateway:
            assert gateway.server == "http://from-env:9"
            gateway.status("local", "j1")
    assert route.calls.last.request.headers["Authorization"] == "Bearer env-token"


def test_async_client_against_the_real_server(server: Server) -> None:
    async def scenario() -> None:
        async with AsyncGatewayClient(server.url, server.token) as gateway:
            submitted = await gateway.submit(
                "local",
                {"executable": "/bin/sh", "arguments": ["-c", "echo async"]},
                project="proj1",
            )
            done = await gateway.wait("local", submitted.id, timeout=60)
            assert done.state == JobState.COMPLETED
            assert await gateway.output("local", submitted.id) == "async\n"
            long = await gateway.submit(
                "local", {"executable": "/bin/sleep", "arguments": ["60"]}, project="proj1"
            )
            with pytest.raises(WaitTimeout):
                await gateway.wait("local", long.id, timeout=0.5)
            await gateway.cancel("local", long.id)
            assert (await gateway.wait("local", long.id, timeout=60)).state == JobState.CANCELED
            assert (await gateway.capabilities("local")).resource == "local"
            with pytest.raises(NotFound):
                await gateway.status("local", "no-such-job")

    asyncio.run(scenario())
