"""`iri-gateway jobs watch`: live lines, the exit codes, Ctrl-C, and polling against a server
without the stream; the command runs as a real process against a real HTTP server speaking
the event stream's format (tests/support/event_server.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import httpx

from tests.conftest import Server
from tests.support.event_server import EventServerState, event_server, until
from tests.support.serve import clean_env

EVENTS = "/api/v2/compute/events"
STATUS = "/api/v2/compute/status/"


def start(url: str, *args: str, token: str = "t") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "iri_gateway", "jobs", "watch", *args, "--server", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**clean_env(), "IRI_GATEWAY_TOKEN": token, "COLUMNS": "200"},
    )


def after_reads(state: EventServerState, reads: int, changes: list[tuple[str, str]]) -> None:
    def run() -> None:
        until(lambda: state.count(STATUS) >= reads)
        for job_id, new in changes:
            state.change(job_id, new)

    threading.Thread(target=run, daemon=True).start()


def test_watch_prints_each_change_and_exits_0_when_all_completed() -> None:
    with event_server() as (url, state):
        state.add_job("j1")
        state.add_job("j2")
        after_reads(state, 2, [("j1", "active"), ("j2", "completed"), ("j1", "completed")])
        done = start(url, "j1", "j2", "-r", "local")
        out, err = done.communicate(timeout=60)
    assert done.returncode == 0, err
    lines = [line.split()[1:3] for line in out.splitlines()]
    assert lines == [["j1", "active"], ["j2", "completed"], ["j1", "completed"]]
    assert state.count(EVENTS) == 1 and state.count(STATUS) == 2


def test_a_failed_job_exits_1_and_a_final_one_is_not_waited_for() -> None:
    with event_server() as (url, state):
        state.add_job("ok")
        state.add_job("bad")
        state.change("ok", "completed", silent=True)
        after_reads(state, 2, [("bad", "failed")])
        done = start(url, "ok", "bad", "-r", "local", "--state", "active")
        out, err = done.communicate(timeout=60)
    assert done.returncode == 1, err
    assert "ok  completed  (already)" in out
    assert "bad" not in out, "--state active hides the failure, which still ends the watch"


def test_the_timeout_exits_2_naming_the_jobs_left() -> None:
    with event_server() as (url, state):
        state.add_job("slow", "active")
        done = start(url, "slow", "-r", "local", "--timeout", "0.5")
        _, err = done.communicate(timeout=60)
    assert done.returncode == 2
    assert "jobs still running after 0.5 s: slow" in err


def test_ctrl_c_stops_cleanly() -> None:
    with event_server() as (url, state):
        watching = start(url)
        until(lambda: state.count(EVENTS) >= 1)
        state.add_job("z")
        state.change("z", "active")
        watching.send_signal(signal.SIGINT)
        _, err = watching.communicate(timeout=60)
    assert watching.returncode == 130
    assert "stopped watching" in err and "Traceback" not in err


def test_a_server_without_the_stream_is_polled_or_refused() -> None:
    with event_server() as (url, state):
        state.has_stream = False
        state.add_job("p")
        after_reads(state, 2, [("p", "completed")])
        polled = start(url, "p", "-r", "local")
        out, err = polled.communicate(timeout=60)
        refused = start(url)
        _, refusal = refused.communicate(timeout=60)
    assert polled.returncode == 0, err
    assert "has no event stream; polling" in err and "p  completed" in out
    assert refused.returncode == 1
    assert "this server has no event stream to watch" in refusal


def test_job_ids_without_a_resource_are_refused() -> None:
    done = start("http://127.0.0.1:9", "j1")
    _, err = done.communicate(timeout=60)
    assert done.returncode == 2 and "JOB ids need --resource" in err


def test_watch_on_a_real_serve(server: Server) -> None:
    headers = {"Authorization": f"Bearer {server.token}", "X-IRI-Facility-Project": "proj1"}

    def launch(command: str) -> str:
        answer = httpx.post(
            f"{server.url}/api/v2/compute/job/local",
            json={"executable": "/bin/sh", "arguments": ["-c", command]},
            headers=headers,
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        job_id: str = answer.json()["id"]
        return job_id

    good, bad = launch("sleep 2"), launch("sleep 2; exit 3")
    done = start(server.url, good, bad, "-r", "local", token=server.token)
    out, err = done.communicate(timeout=120)
    assert done.returncode == 1, err
    finals = {
        line.split()[1]: line.split()[2]
        for line in out.splitlines()
        if line.split()[2:3] in (["completed"], ["failed"])
    }
    assert finals == {good: "completed", bad: "failed"}
    only_good = start(server.url, good, "-r", "local", token=server.token)
    out, _ = only_good.communicate(timeout=120)
    assert only_good.returncode == 0 and f"{good}  completed  (already)" in out
