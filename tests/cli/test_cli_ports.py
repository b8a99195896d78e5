"""`iri-gateway jobs open` and `jobs forward` against a real serve with a port proxy, and a
real job serving tests/support/service_echo.py on the `local` resource.

`open` prints a link that a browser (here httpx with a cookie jar) follows to the service;
`open --wait` waits for a job that does not run yet, not for one that ended; a job that
ended is refused with the gateway's words (exit 1); wrong arguments exit 2. `forward`
listens on the given local port, carries a connection to the service and back, and stops
on Ctrl-C (exit 130).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.port_proxy import ProxyGateway as Gateway
from tests.support.port_proxy import auth, proxy_gateway
from tests.support.serve import CLI, clean_env, free_port

SERVICE = Path(__file__).parent.parent / "support" / "service_echo.py"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with proxy_gateway(tmp_path_factory.mktemp("cli-ports")) as served:
        yield served


def cli_env(gateway: Gateway) -> dict[str, str]:
    return {**clean_env(), "IRI_GATEWAY_URL": gateway.api, "IRI_GATEWAY_TOKEN": gateway.alice}


def cli(gateway: Gateway, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        env=cli_env(gateway),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def launch(gateway: Gateway, seconds: int) -> str:
    """A job serving the echo on its port `http` for `seconds`."""
    command = (
        f'timeout {seconds} {sys.executable} {SERVICE} --port "$IRI_PORT_HTTP" '
        '--prefix "$IRI_PROXY_PATH_HTTP"'
    )
    spec: dict[str, object] = {
        "executable": "/bin/bash",
        "arguments": ["-c", command],
        "ports": {"http": free_port()},
    }
    answer = httpx.post(
        f"{gateway.api}/api/v2/compute/job/local",
        json=spec,
        headers=auth(gateway.alice),
    )
    assert answer.status_code == 200, answer.text
    job_id: str = answer.json()["id"]
    return job_id


def cancel(gateway: Gateway, job_id: str) -> None:
    httpx.delete(
        f"{gateway.api}/api/v2/compute/cancel/local/{job_id}",
        headers=auth(gateway.alice),
    )


def test_open_waits_for_the_job_and_prints_a_link_a_browser_follows(gateway: Gateway) -> None:
    job_id = launch(gateway, 120)
    try:
        opened = cli(gateway, "jobs", "open", job_id, "http", "-r", "local", "--wait")
        assert opened.returncode == 0, opened.stderr
        link = opened.stdout.strip()
        assert link.startswith(f"{gateway.proxy}/_iri/open?ticket=")
        deadline = time.monotonic() + 30
        with httpx.Client(timeout=10) as browser:
            while True:  # the service may still be starting when the job runs
                page = browser.get(link, follow_redirects=True)
                if page.status_code == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
                link = cli(gateway, "jobs", "open", job_id, "http", "-r", "local").stdout.strip()
            assert page.status_code == 200, page.text
            assert page.json()["path"] == f"/{job_id}/main/http/"
        member_named = cli(gateway, "jobs", "open", job_id, "main", "http", "-r", "local")
        assert member_named.returncode == 0, member_named.stderr
    finally:
        cancel(gateway, job_id)


def test_open_refuses_with_the_gateways_words(gateway: Gateway) -> None:
    job_id = launch(gateway, 1)
    try:
        deadline = time.monotonic() + 30
        while True:
            ended = cli(gateway, "jobs", "open", job_id, "http", "-r", "local")
            if ended.returncode != 0 and "410" in ended.stderr:
                break
            assert time.monotonic() < deadline, ended.stderr
            time.sleep(0.5)
        assert ended.returncode == 1
        assert "ended" in ended.stderr
        undeclared = cli(gateway, "jobs", "open", job_id, "nope", "-r", "local")
        assert undeclared.returncode == 1
        assert "404" in undeclared.stderr
        too_many = cli(gateway, "jobs", "open", job_id, "a", "b", "c", "-r", "local")
        assert too_many.returncode == 2
        assert "[MEMBER] PORT" in too_many.stderr
    finally:
        cancel(gateway, job_id)


def test_open_wait_does_not_wait_for_a_job_that_ended(gateway: Gateway) -> None:
    job_id = launch(gateway, 1)
    try:
        deadline = time.monotonic() + 30
        while True:
            began = time.monotonic()
            waited = cli(
                gateway, "jobs", "open", job_id, "http", "-r", "local", "--wait", "--timeout", "60"
            )
            if "410" in waited.stderr:
                break
            assert time.monotonic() < deadline, waited.stderr
        assert waited.returncode == 1, waited.stderr
        assert time.monotonic() - began < 30
    finally:
        cancel(gateway, job_id)


def test_forward_carries_a_local_port_until_ctrl_c(gateway: Gateway) -> None:
    job_id = launch(gateway, 120)
    local = free_port()
    process = subprocess.Popen(
        [*CLI, "jobs", "forward", job_id, "http", "-r", "local", "--local", str(local)],
        env=cli_env(gateway),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert f"forwarding 127.0.0.1:{local} to port http of job {job_id}" in line, line
        deadline = time.monotonic() + 30
        while True:  # the job's service may still be starting
            try:
                answer = httpx.get(f"http://127.0.0.1:{local}/{job_id}/main/http/ping", timeout=10)
            except httpx.TransportError:
                answer = None
            if answer is not None and answer.status_code == 200:
                break
            assert time.monotonic() < deadline
            time.sleep(0.3)
        assert answer.text == "pong"
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=15) == 130
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{local}/", timeout=5)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        cancel(gateway, job_id)
