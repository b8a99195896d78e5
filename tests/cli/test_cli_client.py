"""The Python client and the client commands against a real `iri-gateway serve`.

One server per module: a subprocess on a free loopback port with its own data directory and a
token for `alice` (project `proj1`) made with `iri-gateway token` beforehand. Jobs are real
processes on the `local` resource. Error mapping is also checked offline with respx.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from iri_gateway.client import (
    GatewayClient,
    GatewayClientError,
    JobInfo,
    WaitTimeout,
    output_path,
)
from iri_gateway.models.job import JobState
from tests.conftest import Server
from tests.support.serve import clean_env


@pytest.fixture
def gateway(server: Server) -> Iterator[GatewayClient]:
    with GatewayClient(server.url, server.token) as client:
        yield client


def shell(command: str, **extra: Any) -> dict[str, Any]:
    return {"executable": "/bin/sh", "arguments": ["-c", command], **extra}


def cli(
    server: Server | None, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run `iri-gateway ARGS` (with --server/--token when a server is given)."""
    connection = ["--server", server.url, "--token", server.token] if server else []
    return subprocess.run(
        [sys.executable, "-m", "iri_gateway", *args, *connection],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or clean_env(),
    )


# ---- the Python client against the real server ------------------------------------------


def test_submit_wait_and_read_the_output(gateway: GatewayClient) -> None:
    job = gateway.submit("local", shell("echo hello; echo world; echo oops >&2"), project="proj1")
    assert job.state in (JobState.QUEUED, JobState.ACTIVE, JobState.COMPLETED)
    seen: list[JobState] = []
    done = gateway.wait("local", job.id, timeout=60, on_update=lambda j: seen.append(j.state))
    assert done.state == JobState.COMPLETED and done.exit_code == 0 and done.final
    assert seen[-1] == JobState.COMPLETED
    assert gateway.output("local", job.id) == "hello\nworld\n"
    assert gateway.output("local", job.id, tail=1) == "world\n"
    assert gateway.output("local", job.id, "stderr") == "oops\n"
    assert job.id in [j.id for j in gateway.jobs("local", historical=True)]
    assert job.id not in [j.id for j in gateway.jobs("local")]


def test_output_of_a_job_with_its_own_directory(gateway: GatewayClient, tmp_path: Path) -> None:
    job = gateway.submit(
        "local", shell("seq 1 5", directory=str(tmp_path / "run")), project="proj1"
    )
    gateway.wait("local", job.id, timeout=60)
    assert (tmp_path / "run" / f"iri-{job.id}.out").read_text() == "1\n2\n3\n4\n5\n"
    assert gateway.output("local", job.id, tail=2) == "4\n5\n"
    path = output_path(gateway.status("local", job.id, include_spec=True))
    assert gateway.head("local", path, lines=1).content == "1\n"
    assert gateway.stat("local", path)["size"] == 10
    assert [e["name"] for e in gateway.ls("local", str(tmp_path / "run"))] == [
        f"iri-{job.id}.err",
        f"iri-{job.id}.out",
    ]


def test_idempotent_submission(gateway: GatewayClient) -> None:
    first = gateway.submit("local", shell("true"), idempotency_key="key-1", project="proj1")
    again = gateway.submit("local", shell("true"), idempotency_key="key-1", project="proj1")
    assert again.id == first.id
    with pytest.raises(GatewayClientError) as caught:
        gateway.submit("local", shell("false"), idempotency_key="key-1", project="proj1")
    assert caught.value.status == 422


def test_cancel_a_running_job(gateway: GatewayClient) -> None:
    job = gateway.submit("local", shell("sleep 60"), project="proj1")
    with pytest.raises(WaitTimeout) as caught:
        gateway.wait("local", job.id, timeout=0.5)
    assert not caught.value.job.final
    gateway.cancel("local", job.id)
    assert gateway.wait("local", job.id, timeout=60).state == JobState.CANCELED


def test_restart_runs_a_finished_job_again_as_the_same_job(
    gateway: GatewayClient, server: Server, tmp_path: Path
) -> None:
    """SDK and CLI: restartJob puts the job back in `queued`; it runs again (the file it
    appends to has two lines) and its history keeps both runs and the restart."""
    runs = tmp_path / "runs"
    job = gateway.submit("local", shell(f"echo run >> {runs}"), project="proj1")
    assert gateway.wait("local", job.id, timeout=60).state == JobState.COMPLETED
    again = gateway.restart("local", job.id)
    assert again.id == job.id and again.state == JobState.QUEUED
    assert again.message is not None and again.message.startswith("restart 1: local restart")
    assert gateway.wait("local", job.id, timeout=60).state == JobState.COMPLETED
    assert runs.read_text() == "run\nrun\n"

    shown = cli(server, "restart", job.id, "-r", "local")
    assert shown.returncode == 0, shown.stderr
    assert "queued" in shown.stdout and "restart 2: local restart" in shown.stdout
    assert gateway.wait("local", job.id, timeout=60).state == JobState.COMPLETED
    assert runs.read_text() == "run\nrun\nrun\n"
    history = gateway.status("local", job.id).meta_data["history"]
    assert [h["state"] for h in history].count("completed") == 3
    assert [h["message"] for h in history if h["message"].startswith("restart ")] == [
        f"restart 1: local restart of {job.id}",
        f"restart 2: local restart of {job.id}",
    ]

    unknown = cli(server, "restart", "no-such-job", "-r", "local")
    assert unknown.returncode == 1 and "Not Found" in unknown.stderr


def test_extensions(gateway: GatewayClient) -> None:
    plan = gateway.plan("local", shell("true"))
    assert plan.resource == "local" and plan.runtime == "none" and "#!" in plan.script
    ranked = gateway.placement(shell("true"))
    assert ranked[0].resource == "local" and ranked[0].runnable
    assert gateway.capabilities("local").resource == "local"
    with pytest.raises(GatewayClientError) as caught:
        gateway.plan("local", {**shell("true"), "resources": {"node_count": 10_000}})
    assert caught.value.status == 422
    assert "resources.node_count" in [p["name"] for p in caught.value.invalid_params]


def test_errors_from_the_real_server(server: Server, gateway: GatewayClient) -> None:
    with (
        GatewayClient(server.url, "not-a-token") as stranger,
        pytest.raises(GatewayClientError) as caught,
    ):
        stranger.jobs("local")
    assert (caught.value.status, caught.value.title) == (401, "Unauthorized")
    with pytest.raises(GatewayClientError) as caught:
        gateway.status("local", "no-such-job")
    assert caught.value.status == 404
    with pytest.raises(GatewayClientError) as caught:
        gateway.tail("local", "/etc/passwd", lines=1)
    assert caught.value.status == 404
    with pytest.raises(GatewayClientError) as caught:
        gateway.submit("local", {"executable": "/bin/true", "bogus": 1}, project="proj1")
    assert caught.value.status == 422
    assert [p["name"] for p in caught.value.invalid_params] == ["bogus"]


def test_server_and_token_come_from_the_environment(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IRI_GATEWAY_URL", server.url)
    monkeypatch.setenv("IRI_GATEWAY_TOKEN", server.token)
    with GatewayClient() as client:
        assert client.server == server.url
        assert client.capabilities("local").resource == "local"
    monkeypatch.delenv("IRI_GATEWAY_URL")
    assert GatewayClient().server == "http://127.0.0.1:8000"


# ---- the commands against the real server ---------------------------------------------------


def test_cli_submit_wait_status_output(server: Server, tmp_path: Path) -> None:
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(shell("echo from-the-cli")))
    submitted = cli(server, "submit", str(job_file), "--resource", "local", "--project", "proj1")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    assert len(job_id) == 36

    waited = cli(server, "wait", job_id, "-r", "local", "--timeout", "60")
    assert waited.returncode == 0, waited.stderr
    assert "completed" in waited.stderr

    output = cli(server, "output", job_id, "-r", "local")
    assert (output.returncode, output.stdout) == (0, "from-the-cli\n"), output.stderr

    shown = cli(server, "status", job_id, "-r", "local")
    assert shown.returncode == 0 and "completed" in shown.stdout and "History" in shown.stdout
    document = json.loads(cli(server, "status", job_id, "-r", "local", "--json").stdout)
    assert (document["id"], document["state"], document["exit_code"]) == (job_id, "completed", 0)

    listed = cli(server, "jobs", "-r", "local", "--all")
    assert listed.returncode == 0 and job_id[:8] in listed.stdout


def test_cli_submit_wait_exit_codes(server: Server, tmp_path: Path) -> None:
    failing = tmp_path / "fail.json"
    failing.write_text(json.dumps(shell("exit 3")))
    result = cli(
        server,
        "submit",
        str(failing),
        "-r",
        "local",
        "--project",
        "proj1",
        "--wait",
        "--timeout",
        "60",
    )
    assert result.returncode == 1, result.stderr
    assert len(result.stdout.strip()) == 36 and "failed" in result.stderr

    sleeper = tmp_path / "sleep.json"
    sleeper.write_text(json.dumps(shell("sleep 60")))
    result = cli(
        server,
        "submit",
        str(sleeper),
        "-r",
        "local",
        "--project",
        "proj1",
        "--wait",
        "--timeout",
        "1",
    )
    assert result.returncode == 2, result.stderr
    job_id = result.stdout.strip()
    assert "still" in result.stderr

    canceled = cli(server, "cancel", job_id, "-r", "local")
    assert canceled.returncode == 0, canceled.stderr
    waited = cli(server, "wait", job_id, "-r", "local", "--timeout", "60")
    assert waited.returncode == 1 and "canceled" in waited.stderr


def test_cli_errors_and_extensions(server: Server, tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(shell("true")))
    too_big = tmp_path / "big.json"
    too_big.write_text(json.dumps({**shell("true"), "resources": {"node_count": 10_000}}))
    not_json = tmp_path / "bad.json"
    not_json.write_text("{")

    plan = cli(server, "remote-plan", str(good), "-r", "local")
    assert plan.returncode == 0 and json.loads(plan.stdout)["runtime"] == "none"
    refused = cli(server, "remote-plan", str(too_big), "-r", "local")
    assert refused.returncode == 2 and "resources.node_count" in refused.stderr
    placed = cli(server, "remote-placement", str(good))
    assert placed.returncode == 0 and "local" in placed.stdout
    assert json.loads(cli(server, "remote-placement", str(good), "--json").stdout)[0]["runnable"]

    assert cli(server, "submit", str(not_json), "-r", "local").returncode == 2
    unknown = cli(server, "status", "no-such-job", "-r", "local")
    assert unknown.returncode == 1 and "404" in unknown.stderr
    no_project = cli(server, "submit", str(good), "-r", "local")
    assert no_project.returncode == 2 and "project" in no_project.stderr  # 400: invalid

    env = {**clean_env(), "IRI_GATEWAY_URL": server.url, "IRI_GATEWAY_TOKEN": "wrong"}
    denied = cli(None, "jobs", "-r", "local", env=env)
    assert denied.returncode == 1 and "401 Unauthorized" in denied.stderr
    env["IRI_GATEWAY_TOKEN"] = server.token
    assert cli(None, "jobs", "-r", "local", env=env).returncode == 0
    nobody = cli(None, "jobs", "-r", "local", "--server", "http://127.0.0.1:9")
    assert nobody.returncode == 1 and "No answer" in nobody.stderr


# ---- error mapping and polling, offline (respx) ----------------------------------------------

BASE = "http://gateway.test"
PROBLEM = {"content-type": "application/problem+json"}


def test_a_422_problem_becomes_a_typed_error() -> None:
    body = {
        "type": "about:blank",
        "status": 422,
        "title": "Unprocessable Entity",
        "detail": "the job cannot run on local",
        "instance": f"{BASE}/api/v2/compute/job/local",
        "invalid_params": [
            {"name": "resources.node_count", "reason": "at most 1 node"},
            {"name": "container.runtime", "reason": "shifter: not offered"},
        ],
    }
    with respx.mock(base_url=BASE) as mock, GatewayClient(BASE, "t") as client:
        route = mock.post("/api/v2/compute/job/local").mock(
            return_value=httpx.Response(422, json=body, headers=PROBLEM)
        )
        with pytest.raises(GatewayClientError) as caught:
            client.submit("local", {"executable": "/bin/true"}, project="p1", idempotency_key="k")
    error = caught.value
    assert (error.status, error.title, error.detail) == (
        422,
        "Unprocessable Entity",
        "the job cannot run on local",
    )
    assert error.invalid_params == body["invalid_params"]
    assert error.instance == body["instance"] and error.type == "about:blank"
    assert "resources.node_count: at most 1 node" in str(error)
    sent = route.calls.last.request
    assert sent.headers["Authorization"] == "Bearer t"
    assert sent.headers["Idempotency-Key"] == "k"
    assert sent.headers["X-IRI-Facility-Project"] == "p1"


def test_401_and_other_failures_become_typed_errors() -> None:
    with respx.mock(base_url=BASE) as mock, GatewayClient(BASE) as client:
        mock.get("/api/v2/compute/status/local/j1").mock(
            return_value=httpx.Response(
                401,
                headers={**PROBLEM, "WWW-Authenticate": "Bearer"},
                json={
                    "type": "about:blank",
                    "status": 401,
                    "title": "Unauthorized",
                    "detail": "a bearer token is required",
                    "instance": "x",
                },
            )
        )
        mock.delete("/api/v2/compute/cancel/local/j1").mock(
            return_value=httpx.Response(502, text="<html>bad gateway</html>")
        )
        mock.post("/api/v2/compute/status/local").mock(side_effect=httpx.ConnectError("refused"))
        with pytest.raises(GatewayClientError) as caught:
            client.status("local", "j1")
        assert (caught.value.status, caught.value.title) == (401, "Unauthorized")
        assert caught.value.detail == "a bearer token is required"
        assert caught.value.invalid_params == []
        assert "Authorization" not in mock.calls.last.request.headers
        with pytest.raises(GatewayClientError) as caught:
            client.cancel("local", "j1")
        assert (caught.value.status, caught.value.detail) == (502, "<html>bad gateway</html>")
        with pytest.raises(GatewayClientError) as caught:
            client.jobs("local")
        assert caught.value.status == 0 and "refused" in caught.value.detail


def _job(state: str) -> dict[str, Any]:
    return {"id": "j1", "status": {"state": state, "time": 1.0, "message": state}}


def test_wait_backs_off_from_0_2_to_5_seconds() -> None:
    sleeps: list[float] = []
    now = [0.0]

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    answers = [httpx.Response(200, json=_job("active")) for _ in range(12)]
    answers.append(httpx.Response(200, json=_job("completed")))
    with (
        respx.mock(base_url=BASE) as mock,
        GatewayClient(BASE, "t", sleep=sleep, clock=lambda: now[0]) as client,
    ):
        mock.get("/api/v2/compute/status/local/j1").mock(side_effect=answers)
        job = client.wait("local", "j1", use_events=False)
    assert job.state == JobState.COMPLETED
    assert sleeps[0] == pytest.approx(0.2)
    assert sleeps == sorted(sleeps)
    assert max(sleeps) == 5.0 and sleeps[-1] == 5.0

    sleeps.clear()
    now[0] = 0.0
    with (
        respx.mock(base_url=BASE) as mock,
        GatewayClient(BASE, "t", sleep=sleep, clock=lambda: now[0]) as client,
    ):
        mock.get("/api/v2/compute/status/local/j1").mock(
            return_value=httpx.Response(200, json=_job("queued"))
        )
        with pytest.raises(WaitTimeout) as caught:
            client.wait("local", "j1", timeout=3, use_events=False)
    assert caught.value.job.state == JobState.QUEUED
    assert sum(sleeps) == pytest.approx(3.0)


def test_output_paths_follow_the_gateways_rule() -> None:
    bare = JobInfo("j1", JobState.COMPLETED, job_spec={"executable": "x"})
    assert output_path(bare) == "j1/stdout.txt"
    assert output_path(bare, "stderr") == "j1/stderr.txt"
    named = JobInfo("j1", JobState.COMPLETED, job_spec={"directory": "/w", "stdout_path": "o"})
    assert output_path(named) == "/w/o" and output_path(named, "stderr") == "/w/iri-j1.err"
    absolute = JobInfo("j1", JobState.COMPLETED, job_spec={"stdout_path": "/logs/o"})
    assert output_path(absolute) == "/logs/o"
    told = JobInfo("j1", JobState.COMPLETED, meta_data={"stdout_path": "/site/o"})
    assert output_path(told) == "/site/o"


def test_status_prints_the_members_of_a_cluster_job() -> None:
    from typer.testing import CliRunner

    from iri_gateway.cli.app import app

    members = [
        {
            "name": "master1",
            "role": "master",
            "index": 1,
            "node": "n1",
            "address": "127.0.0.1",
            "state": "completed",
            "exit_code": 0,
        },
        {
            "name": "worker2",
            "role": "worker",
            "index": 2,
            "node": "n3",
            "address": "127.0.0.3",
            "state": "failed",
            "exit_code": 1,
        },
        {
            "name": "worker3",
            "role": "worker",
            "index": 3,
            "node": "n4",
            "address": "127.0.0.4",
            "state": "failed",
            "exit_code": None,
        },
    ]
    job = {
        "id": "j1",
        "status": {
            "state": "failed",
            "time": 1.0,
            "exit_code": 1,
            "message": "member worker2 (role worker, on n3) exited with 1",
            "meta_data": {"members": members},
        },
    }
    plain = {"id": "j2", "status": {"state": "completed", "time": 1.0, "meta_data": {}}}
    runner = CliRunner()
    with respx.mock(base_url=BASE) as mock:
        mock.get("/api/v2/compute/status/local/j1").mock(return_value=httpx.Response(200, json=job))
        mock.get("/api/v2/compute/status/local/j2").mock(
            return_value=httpx.Response(200, json=plain)
        )
        shown = runner.invoke(app, ["status", "j1", "-r", "local", "--server", BASE])
        without = runner.invoke(app, ["status", "j2", "-r", "local", "--server", BASE])
    assert shown.exit_code == 0, shown.output
    rows = [
        line.split("│")
        for line in shown.output.splitlines()
        if "worker" in line and "127.0.0" in line
    ]
    cells = [[cell.strip() for cell in row if cell.strip()] for row in rows]
    assert cells == [
        ["worker2", "worker", "n3", "127.0.0.3", "failed", "1"],
        ["worker3", "worker", "n4", "127.0.0.4", "failed", "-"],
    ]
    assert "Members" in shown.output and "master1" in shown.output
    assert without.exit_code == 0 and "Members" not in without.output
