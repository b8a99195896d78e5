"""The port proxy on the test Slurm (issue 29): a job's HTTP server and WebSocket echo
reached through the gateway (and through a raw TCP tunnel, `jobs forward`), directly
(`cluster`: the gateway reaches the nodes) and through the SSH login node (`cluster-ssh`:
an SSH `direct-tcpip` channel per connection), as a plain process and in Podman (BusyBox's
`httpd`); a cluster job's two members' ports; who may reach them and when.

The service is tests/support/service_echo.py (standard library only): it echoes each HTTP
request as JSON (method, path, query, headers, body) and each WebSocket message, under the
base path the job is told (`IRI_PROXY_PATH_<NAME>`, or the member's under
`IRI_PROXY_BASE`).
"""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from iri_gateway.client import GatewayClient
from tests.integration.conftest import ClusterInfo
from tests.integration.gateway_process import API, Gateway, cancel, launch, serve_with_proxy, status
from tests.support.serve import free_port, issue_token
from tests.support.websocket_client import websocket_echo

ECHO = Path(__file__).resolve().parent.parent / "support" / "service_echo.py"
FINAL = {"completed", "failed", "canceled"}


@pytest.fixture(scope="module")
def echo_script(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The echo service where every job's account may read it (alice's jobs over SSH too)."""
    folder = tmp_path_factory.mktemp("port-proxy-service")
    folder.chmod(0o755)
    for parent in folder.parents:
        if str(parent) in ("/", "/tmp"):
            break
        parent.chmod(parent.stat().st_mode | 0o755)
    script = folder / "service_echo.py"
    shutil.copyfile(ECHO, script)
    script.chmod(0o644)
    return str(script)


@pytest.fixture(scope="module")
def gateway(cluster_profile: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    data = tmp_path_factory.mktemp("port-proxy") / "data"
    env = {"IRI_GATEWAY_PROXY_LINK_TTL": "5"}
    with serve_with_proxy(cluster_profile, data, env=env) as gateway:
        yield gateway


def proxy_of(gateway: Gateway) -> str:
    return gateway.url.replace("127.0.0.1", "localhost")


def service(script: str, *, port: int) -> dict[str, Any]:
    """A job serving the echo on its declared port `http`, under its proxy path."""
    command = f'exec python3 {script} --port "$IRI_PORT_HTTP" --prefix "$IRI_PROXY_PATH_HTTP"'
    return {
        "name": "port-proxy-echo",
        "executable": "/bin/bash",
        "arguments": ["-c", command],
        "ports": {"http": port},
        "resources": {"exclusive_node_use": False, "memory": 200 * 1024 * 1024},
        "attributes": {"duration": 300},
    }


def proxied(
    gateway: Gateway, job_id: str, member: str, port: str, path: str = "", timeout: float = 60
) -> httpx.Response:
    """GET through the proxy with alice's token, once the port answers (409/502 while the
    job or its server starts)."""
    url = f"{proxy_of(gateway)}/{job_id}/{member}/{port}/{path}"
    deadline = time.monotonic() + timeout
    while True:
        answer = httpx.get(url, headers={"Authorization": f"Bearer {gateway.token}"}, timeout=30)
        if answer.status_code not in (409, 502) or time.monotonic() > deadline:
            return answer
        time.sleep(0.5)


def free_ports(count: int) -> int:
    """The first of `count` consecutive ports nothing listens on now (a role's members listen
    on base + k - 1)."""
    for _ in range(100):
        base = free_port()
        if base + count - 1 <= 65535 and all(_free(base + offset) for offset in range(1, count)):
            return base
    raise AssertionError(f"no {count} consecutive free ports found")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
        return True


def check_service(
    gateway: Gateway, job_id: str, member: str = "main", resource: str = "cluster"
) -> dict[str, Any]:
    """The echo reached over HTTP and WebSocket; what it saw of the request."""
    answer = proxied(gateway, job_id, member, "http", "hello?x=1")
    assert answer.status_code == 200, (
        f"{answer.text}\njob: {status(gateway, resource, job_id)}\n{gateway.tracebacks()}"
    )
    seen: dict[str, Any] = answer.json()
    assert seen["path"] == f"/{job_id}/{member}/http/hello"
    assert seen["query"] == "x=1"
    headers = {name.lower(): value for name, value in seen["headers"].items()}
    # The user's token never reaches the service: it is shown the job's own.
    assert gateway.token not in str(seen)
    assert headers["authorization"].startswith("token ")
    assert headers["x-forwarded-prefix"] == f"/{job_id}/{member}/http"
    url = f"{proxy_of(gateway)}/{job_id}/{member}/http/ws".replace("http://", "ws://")
    replies = websocket_echo(
        url,
        ["one", b"\x00two", "three" * 1000],
        headers={"Authorization": f"Bearer {gateway.token}"},
    )
    assert replies == ["one", b"\x00two", "three" * 1000]
    return seen


@pytest.mark.parametrize("resource", ["cluster", "cluster-ssh"])
def test_a_plain_process_is_reached_over_http_and_websocket(
    gateway: Gateway, echo_script: str, resource: str
) -> None:
    job_id = launch(gateway, resource, service(echo_script, port=free_port()))
    try:
        seen = check_service(gateway, job_id, resource=resource)
        token = seen["headers"].get("Authorization") or seen["headers"]["authorization"]
        assert token.removeprefix("token ") != gateway.token
        # A raw TCP tunnel (`jobs forward`) reaches the same port the same way.
        with (
            GatewayClient(gateway.url, gateway.token) as client,
            client.forward_port(resource, job_id, "http") as forward,
        ):
            host, port = forward.address
            base = f"http://{host}:{port}/{job_id}/main/http"
            assert httpx.get(f"{base}/ping", timeout=30).text == "pong"
            big = httpx.get(f"{base}/big?bytes=2000000", timeout=60).content
            assert big == b"x" * 2_000_000
    finally:
        cancel(gateway, resource, job_id)


def test_a_podman_container_is_reached(gateway: Gateway, cluster: ClusterInfo) -> None:
    """BusyBox's `httpd` in the test image (Podman, host network) serves a page it writes
    under its proxy path: the gateway reaches a port inside a container as it reaches a
    process's."""
    page = "served from the container"
    command = (
        'mkdir -p "/tmp/www$IRI_PROXY_PATH_HTTP"'
        f' && echo "{page} $IRI_PROXY_BASE" > "/tmp/www$IRI_PROXY_PATH_HTTP/index.html"'
        ' && exec httpd -f -p "$IRI_PORT_HTTP" -h /tmp/www'
    )
    spec: dict[str, Any] = {
        "name": "port-proxy-httpd",
        "executable": "/bin/sh",
        "arguments": ["-c", command],
        "ports": {"http": free_port()},
        "resources": {"exclusive_node_use": False, "memory": 200 * 1024 * 1024},
        "attributes": {"duration": 300},
        "container": {"image": cluster.test_image, "network": "host"},
    }
    job_id = launch(gateway, "cluster", spec)
    try:
        answer = proxied(gateway, job_id, "main", "http", "index.html")
        assert answer.status_code == 200, (
            f"{answer.text}\njob: {status(gateway, 'cluster', job_id)}\n{gateway.tracebacks()}"
        )
        assert answer.text.strip() == f"{page} /{job_id}/"
    finally:
        cancel(gateway, "cluster", job_id)


def test_two_members_of_a_cluster_job_each_serve_their_own_port(
    gateway: Gateway, echo_script: str
) -> None:
    base = free_ports(2)
    prefix = '"${IRI_PROXY_BASE}${IRI_CLUSTER_ROLE}${IRI_CLUSTER_ROLE_INDEX}/http/"'
    command = f'exec python3 {echo_script} --port "$IRI_CLUSTER_PORT_HTTP" --prefix {prefix}'
    spec = {
        "name": "port-proxy-members",
        "executable": "/bin/bash",
        "arguments": ["-c", command],
        "resources": {"exclusive_node_use": False, "memory": 200 * 1024 * 1024},
        "attributes": {"duration": 300},
        "roles": [
            {
                "name": "server",
                "count": 2,
                "ports": {"http": base},
            }
        ],
    }
    job_id = launch(gateway, "cluster", spec)
    try:
        ports = {p["member"]: p for p in status(gateway, "cluster", job_id)["meta_data"]["ports"]}
        assert set(ports) == {"server1", "server2"}
        assert ports["server2"]["port"] == base + 1
        first = check_service(gateway, job_id, "server1")
        second = check_service(gateway, job_id, "server2")
        assert first["port"] == base and second["port"] == base + 1
    finally:
        cancel(gateway, "cluster", job_id)


def test_who_and_when(gateway: Gateway, echo_script: str, tmp_path: Path) -> None:
    """Another user: 404; an undeclared port: 404; a link past its time: refused; after the
    job ends: 410 (and an open session is refused too)."""
    job_id = launch(gateway, "cluster", service(echo_script, port=free_port()))
    try:
        assert proxied(gateway, job_id, "main", "http").status_code == 200
        bob = issue_token(gateway.log.parent, "bob", "proj1")
        theirs = httpx.get(
            f"{proxy_of(gateway)}/{job_id}/main/http/",
            headers={"Authorization": f"Bearer {bob}"},
            timeout=30,
        )
        assert theirs.status_code == 404, theirs.text
        undeclared = proxied(gateway, job_id, "main", "metrics")
        assert undeclared.status_code == 404
        made = httpx.post(
            f"{gateway.url}{API}/compute/ports/cluster/{job_id}/main/http",
            headers=gateway.headers(),
            timeout=30,
        )
        assert made.status_code == 201, made.text
        with httpx.Client(timeout=30) as browser:
            opened = browser.get(made.json()["url"], follow_redirects=True)
            assert opened.status_code == 200, opened.text
            assert opened.json()["path"] == f"/{job_id}/main/http/"
            assert "iri-proxy-session" not in str(opened.json()["headers"])
            late = httpx.post(
                f"{gateway.url}{API}/compute/ports/cluster/{job_id}/main/http",
                headers=gateway.headers(),
                timeout=30,
            ).json()["url"]
            time.sleep(6)  # the link's time (proxy_link_ttl) is 5 s here
            expired = httpx.get(late, timeout=30)
            assert expired.status_code == 401
            assert "expired" in expired.json()["detail"]
            cancel(gateway, "cluster", job_id)
            deadline = time.monotonic() + 60
            while status(gateway, "cluster", job_id)["state"] not in FINAL:
                assert time.monotonic() < deadline
                time.sleep(0.5)
            after = browser.get(f"{proxy_of(gateway)}/{job_id}/main/http/")
            assert after.status_code == 410, after.text
    finally:
        cancel(gateway, "cluster", job_id)
