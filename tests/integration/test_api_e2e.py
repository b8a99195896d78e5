"""End to end over HTTP: a real `iri-gateway serve` on the real Slurm test cluster.

A Podman container job goes in through the official launchJob, the server's own poller
tracks it to `completed`, and its output comes back through the official filesystem `tail`.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from iri_gateway.client import GatewayClient
from tests.integration.test_slurm_engine import cluster_env, write_profile

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayClient]:
    folder = tmp_path_factory.mktemp("gateway")
    profile = write_profile(folder, cluster_env())
    data = folder / "data"
    token = subprocess.run(
        [sys.executable, "-m", "iri_gateway", "token", "alice", "--project", "proj1",
         "--data-dir", str(data)], capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "iri_gateway", "serve", "--port", str(port), "--data-dir",
         str(data), "--profiles", str(profile)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{url}/api/v2/facility", timeout=5)
            break
        except httpx.TransportError:
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.2)
    client = GatewayClient(url, token)
    yield client
    client.close()
    process.terminate()
    process.wait(timeout=30)


def test_podman_job_through_the_official_api(server: GatewayClient) -> None:
    job = server.submit("cluster", {
        "executable": "/bin/sh",
        "arguments": ["-c", "echo from the container; cat /etc/hostname > /dev/null"],
        "environment": {"GREETING": "hi"},
        "container": {"image": "localhost/iri-test/busybox:latest", "network": "none"},
    }, project="proj1")
    assert job.state in ("queued", "active", "completed")
    done = server.wait("cluster", job.id, timeout=120)
    assert done.state == "completed", done
    assert done.exit_code == 0
    path = f"{done.meta_data['directory']}/{done.meta_data['stdout_path']}"
    assert server.tail("cluster", path, lines=5).content == "from the container\n"
    assert server.output("cluster", job.id) == "from the container\n"


def test_failed_and_canceled_over_http(server: GatewayClient) -> None:
    failing = server.submit("cluster", {"executable": "/bin/sh", "arguments": ["-c", "exit 4"]},
                            project="proj1")
    sleeper = server.submit("cluster", {"executable": "/bin/sleep", "arguments": ["120"]},
                            project="proj1")
    assert server.wait("cluster", failing.id, timeout=120).exit_code == 4
    server.cancel("cluster", sleeper.id)
    assert server.wait("cluster", sleeper.id, timeout=120).state == "canceled"
