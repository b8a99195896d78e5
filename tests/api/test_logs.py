"""The log a real `iri-gateway serve` writes to stderr: one JSON line per request with every
field, one per background action, the request id the client was given, the level and format
settings, and no token anywhere, wherever a client put it (docs/operations.md "Logs")."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.conftest import UNHURRIED, token_works
from tests.support.serve import CLI, RunningServe, clean_env, issue_token, running_serve
from tests.support.token_leaks import leaks

REQUEST_FIELDS = {
    "time",
    "level",
    "logger",
    "process",
    "message",
    "event",
    "request_id",
    "user",
    "operation",
    "resource",
    "method",
    "route",
    "status",
    "duration_ms",
    "trace_id",
    "client",
}
PROJECT = {"X-IRI-Facility-Project": "proj1"}
JOB = {"executable": "/bin/sh", "arguments": ["-c", "echo hi"]}


class Served:
    """A serve with JSON logs at debug level, and alice's token."""

    def __init__(self, served: RunningServe, token: str) -> None:
        self.served, self.token = served, token
        self.url = served.url
        self.alice = {"Authorization": f"Bearer {token}"}

    def lines(self) -> list[dict[str, Any]]:
        """Every line of the log, each parsed as JSON (a line that is not fails the test)."""
        parsed = []
        for line in self.served.output().splitlines():
            try:
                parsed.append(json.loads(line))
            except json.JSONDecodeError:
                raise AssertionError(f"a log line is not JSON: {line!r}") from None
        return parsed

    def request_line(self, request_id: str, timeout: float = 10) -> dict[str, Any]:
        """The `http.request` line of REQUEST_ID (written just after the answer)."""
        deadline = time.monotonic() + timeout
        while True:
            found = [
                line
                for line in self.lines()
                if line.get("event") == "http.request" and line.get("request_id") == request_id
            ]
            if found:
                assert len(found) == 1, found
                return found[0]
            assert time.monotonic() < deadline, f"no line for request {request_id}"
            time.sleep(0.1)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    data_dir = tmp_path_factory.mktemp("logs-data")
    token = issue_token(data_dir, "alice", "proj1")
    env = {**UNHURRIED, "IRI_GATEWAY_LOG_LEVEL": "debug", "IRI_GATEWAY_LOG_FORMAT": "json"}
    with running_serve(data_dir, extra_env=env, ready=token_works(token)) as running:
        yield Served(running, token)


def test_every_request_is_one_json_line_with_every_field(served: Served) -> None:
    ok = httpx.get(f"{served.url}/api/v2/facility", headers={"X-Request-ID": "client-id.42"})
    assert ok.status_code == 200 and ok.headers["X-Request-ID"] == "client-id.42"
    line = served.request_line("client-id.42")
    assert set(line) >= REQUEST_FIELDS, sorted(REQUEST_FIELDS - set(line))
    assert line["event"] == "http.request" and line["logger"] == "iri_gateway.access"
    assert line["operation"] == "getFacility" and line["route"] == "/api/v2/facility"
    assert (line["method"], line["status"], line["level"]) == ("GET", 200, "INFO")
    assert line["user"] is None and line["resource"] is None and line["trace_id"] is None
    assert line["client"] == "127.0.0.1"
    assert isinstance(line["duration_ms"], float) and 0 < line["duration_ms"] < 30_000
    written = datetime.fromisoformat(line["time"])
    assert written.utcoffset() is not None and written.utcoffset().total_seconds() == 0
    assert abs((datetime.now(UTC) - written).total_seconds()) < 60


def test_a_4xx_names_the_user_operation_and_resource(served: Served) -> None:
    missing = httpx.get(
        f"{served.url}/api/v2/compute/status/local/no-such-job",
        headers={**served.alice, "X-Request-ID": "req-4xx-1"},
    )
    assert missing.status_code == 404 and missing.headers["X-Request-ID"] == "req-4xx-1"
    line = served.request_line("req-4xx-1")
    assert line["status"] == 404 and line["user"] == "alice"
    assert line["operation"] == "getJob" and line["resource"] == "local"
    assert line["route"] == "/api/v2/compute/status/{resource_id}/{job_id}"
    stranger = httpx.get(f"{served.url}/api/v2/compute/status/local/no-such-job")
    line = served.request_line(stranger.headers["X-Request-ID"])
    assert (line["status"], line["user"], line["operation"]) == (401, None, "getJob")


def test_a_path_no_route_has_is_a_404_line_without_the_path(served: Served) -> None:
    nowhere = httpx.get(f"{served.url}/nowhere/at-all-secret-looking")
    assert nowhere.status_code == 404
    line = served.request_line(nowhere.headers["X-Request-ID"])
    assert (line["status"], line["route"], line["operation"]) == (404, None, None)
    assert "at-all-secret-looking" not in served.served.output()


@pytest.mark.parametrize(
    "hostile",
    [
        'evil" , "user": "admin',
        "two words",
        "x" * 129,
        '{"event":"forged"}',
    ],
)
def test_a_hostile_request_id_is_replaced_and_never_written(served: Served, hostile: str) -> None:
    answer = httpx.get(f"{served.url}/api/v2/facility", headers={"X-Request-ID": hostile})
    given = answer.headers["X-Request-ID"]
    assert given != hostile and len(given) == 32
    line = served.request_line(given)
    assert line["request_id"] == given
    assert hostile not in served.served.output()


def test_a_newline_in_a_client_value_stays_inside_its_json_string(served: Served) -> None:
    """A resource id is a client's string that is logged: its newline is `\\n` in the line,
    never a second line that could pass for a forged one."""
    forged = 'x\n{"event": "http.request", "user": "admin"}'
    answer = httpx.get(
        f"{served.url}/api/v2/compute/status/{quote(forged, safe='')}/job", headers=served.alice
    )
    assert answer.status_code == 404
    line = served.request_line(answer.headers["X-Request-ID"])
    assert line["resource"] == forged
    admins = [x for x in served.lines() if x.get("user") == "admin"]
    assert admins == [], admins


def test_a_job_is_a_request_line_and_background_lines(served: Served) -> None:
    launched = httpx.post(
        f"{served.url}/api/v2/compute/job/local", json=JOB, headers={**served.alice, **PROJECT}
    )
    assert launched.status_code == 200, launched.text
    job_id = launched.json()["id"]
    line = served.request_line(launched.headers["X-Request-ID"])
    assert (line["operation"], line["resource"], line["user"], line["status"]) == (
        "launchJob",
        "local",
        "alice",
        200,
    )
    deadline = time.monotonic() + 60
    while True:
        about = [x for x in served.lines() if x.get("job") == job_id]
        states = [x["state"] for x in about if x["event"] == "job.state_changed"]
        if "completed" in states:
            break
        assert time.monotonic() < deadline, f"job {job_id}: only {about}"
        time.sleep(0.3)
    sent = [x for x in about if x["event"] == "submission.sent"]
    assert len(sent) == 1 and sent[0]["resource"] == "local" and sent[0]["native_id"]
    done = next(x for x in about if x.get("state") == "completed")
    assert done["user"] == "alice" and done["previous"] in ("queued", "active")
    assert done["logger"].startswith("iri_gateway.") and done["level"] == "INFO"


def test_no_token_is_logged_wherever_a_client_puts_it(served: Served) -> None:
    token, url = served.token, served.url
    basic = base64.b64encode(f"alice:{token}".encode()).decode()
    for request in (
        httpx.Request("GET", f"{url}/api/v2/account/capabilities", headers=served.alice),
        httpx.Request("GET", f"{url}/api/v2/facility", headers={"Authorization": f"Token {token}"}),
        httpx.Request(
            "GET", f"{url}/api/v2/account/capabilities", headers={"Authorization": f"Basic {basic}"}
        ),
        httpx.Request("GET", f"{url}/api/v2/facility?token={token}&access_token={token}"),
        httpx.Request("GET", f"{url}/api/v2/compute/status/local/{token}", headers=served.alice),
        httpx.Request("GET", f"{url}/api/v2/facility", headers={"X-Request-ID": token}),
        httpx.Request(
            "GET", f"{url}/api/v2/facility", headers={**served.alice, "X-Request-ID": f"id-{token}"}
        ),
        httpx.Request("GET", f"{url}/api/v2/facility", headers={"X-Correlation-ID": token}),
        httpx.Request("GET", f"{url}/api/v2/facility", headers={"Cookie": f"token={token}"}),
        httpx.Request(
            "POST",
            f"{url}/api/v2/compute/job/local",
            headers={**served.alice, **PROJECT},
            json={**JOB, "name": token, "environment": {"TOKEN": token}},
        ),
        httpx.Request(
            "POST",
            f"{url}/api/v2/compute/job/local",
            headers={**served.alice, **PROJECT, "Content-Type": "application/json"},
            content=f'{{"not json {token}',
        ),
    ):
        with httpx.Client() as client:
            answer = client.send(request)
        assert answer.status_code < 500, answer.text
        assert token not in answer.headers.get("X-Request-ID", ""), request
        served.request_line(answer.headers["X-Request-ID"])
    time.sleep(2)  # the job's background lines
    assert leaks([served.served.log], [token]) == []


def test_text_format_and_level_settings(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    token = issue_token(data_dir, "alice", "proj1")
    with running_serve(
        data_dir,
        args=("--log-format", "text", "--log-level", "warning"),
        ready=token_works(token),
    ) as quiet:
        httpx.get(f"{quiet.url}/api/v2/facility")
        time.sleep(1)
        assert "http.request" not in quiet.output(), "warning leaves out the request lines"
    with running_serve(
        data_dir, extra_env={"IRI_GATEWAY_LOG_FORMAT": "text"}, ready=token_works(token)
    ) as text:
        answer = httpx.get(
            f"{text.url}/api/v2/compute/status/local/nope", headers={"X-Request-ID": "text-1"}
        )
        assert answer.status_code == 401
        deadline = time.monotonic() + 10
        while not (lines := [x for x in text.output().splitlines() if '"text-1"' in x]):
            assert time.monotonic() < deadline, text.output()
            time.sleep(0.1)
    (line,) = lines
    words = line.split(" ")
    assert words[1:4] == ["INFO", "iri_gateway.access", "http.request"], line
    assert datetime.fromisoformat(words[0]).utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    for field in ('request_id="text-1"', "status=401", 'operation="getJob"', "user=null"):
        assert field in words, line


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (("--log-level", "loud"), {}, "log_level (IRI_GATEWAY_LOG_LEVEL)"),
        ((), {"IRI_GATEWAY_LOG_FORMAT": "xml"}, "log_format (IRI_GATEWAY_LOG_FORMAT)"),
    ],
)
def test_a_bad_log_setting_is_a_clear_start_up_error(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], words: str
) -> None:
    done = subprocess.run(
        [*CLI, "serve", "--data-dir", str(tmp_path / "data"), "--port", "1", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean_env(), **env},
    )
    assert done.returncode == 2, done
    assert words in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert ("'json' or 'text'" if "FORMAT" in words else "'debug'") in done.stderr, done.stderr


def test_the_session_check_finds_a_token_in_a_log(tmp_path: Path) -> None:
    """The check every test session ends with (tests/support/token_leaks.py) finds a token,
    whole or cut short, and nothing else."""
    token = "Zq3x" * 10 + "abc"
    log = tmp_path / "serve.log"
    log.write_text(f'{{"a": 1}}\n{{"auth": "Bearer {token[:20]}"}}\nclean\n')
    (found,) = leaks([log], [token])
    assert found.startswith(f"{log}:2:")
    log.write_text("nothing here\n")
    assert leaks([log], [token]) == []


def test_every_worker_logs_as_the_command_line_says(tmp_path: Path, postgres_url: str) -> None:
    """`--log-format text` given to `serve --workers 2` reaches both workers (whose
    settings come from their environment) and the supervisor; uvicorn's own lines too."""
    data_dir = tmp_path / "data"
    token = issue_token(data_dir, "alice", "proj1")
    env = {"IRI_GATEWAY_DATABASE_URL": postgres_url}
    with running_serve(
        data_dir,
        args=("--workers", "2", "--log-format", "text"),
        extra_env=env,
        workers=None,
        ready=token_works(token),
    ) as served:
        for index in range(12):
            httpx.get(f"{served.url}/api/v2/facility", headers={"X-Request-ID": f"w-{index}"})
        deadline = time.monotonic() + 20
        while (output := served.output()).count('request_id="w-') < 12:
            assert time.monotonic() < deadline, output
            time.sleep(0.2)
    lines = [line for line in output.splitlines() if 'request_id="w-' in line]
    assert len(lines) == 12, output
    assert all(
        line.split(" ")[1:4] == ["INFO", "iri_gateway.access", "http.request"] for line in lines
    )
    assert not any(line.startswith("{") for line in output.splitlines()), output
    assert " INFO uvicorn.error log Started parent process" in output, "the supervisor's own"


def test_a_leak_fails_the_whole_session(tmp_path: Path) -> None:
    """The plug-in itself, in a pytest session of its own: a test that passes, but whose
    serve output held a token the session issued, ends the session with exit status 1."""
    (tmp_path / "test_leaky.py").write_text(
        "from pathlib import Path\n"
        "from tests.support import serve\n"
        "def test_passes(tmp_path: Path) -> None:\n"
        "    serve.ISSUED_TOKENS.append('Zq3xZq3xZq3xZq3xZq3x-leaked')\n"
        "    log = tmp_path / 'serve.log'\n"
        "    log.write_text('GET /?token=Zq3xZq3xZq3xZq3xZq3x-leaked\\n')\n"
        "    serve._keep(log)\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.support.token_leaks",
            "-p",
            "no:randomly",
            "--rootdir",
            str(tmp_path),
            "-c",
            os.devnull,
            str(tmp_path / "test_leaky.py"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**clean_env(), "PYTHONPATH": str(root)},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 passed" in done.stdout and "tokens issued by the tests were found" in done.stdout
    assert "serve.log:1: token Zq3x..." in done.stdout, done.stdout
