"""The port proxy on the real OpenPBS (scripts/pbs): where a running job is comes from
`qstat`'s `exec_host`, and a cluster job's members from the hosts they report, and the
proxy reaches the echo service of a plain job and of each member of a two-member cluster
job, over HTTP and WebSocket, on `pbs` (as root, from the gateway) and `pbs-ssh` (as alice,
through the SSH login node). The service is tests/support/service_echo.py.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.gateway_process import (
    Gateway,
    cancel,
    launch,
    serve_with_proxy,
    status,
)
from tests.integration.test_port_proxy_cluster import check_service, free_ports, service
from tests.support.serve import free_port

ECHO = Path(__file__).resolve().parent.parent / "support" / "service_echo.py"


@pytest.fixture(scope="module")
def echo_script(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The echo service where alice's jobs may read it too."""
    folder = Path("/tmp") / f"iri-pbs-proxy-{free_port()}"
    folder.mkdir(mode=0o755)
    script = folder / "service_echo.py"
    shutil.copyfile(ECHO, script)
    script.chmod(0o644)
    return str(script)


@pytest.fixture(scope="module")
def gateway(pbs_profile: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with serve_with_proxy(pbs_profile, tmp_path_factory.mktemp("pbs-proxy") / "data") as g:
        yield g


@pytest.mark.parametrize("resource", ["pbs", "pbs-ssh"])
def test_a_plain_pbs_job_is_reached(gateway: Gateway, echo_script: str, resource: str) -> None:
    spec = service(echo_script, port=free_port())
    spec["resources"] = {"node_count": 1, "process_count": 1}
    job_id = launch(gateway, resource, spec)
    try:
        check_service(gateway, job_id, resource=resource)
    finally:
        cancel(gateway, resource, job_id)


def test_each_member_of_a_pbs_cluster_job_is_reached(gateway: Gateway, echo_script: str) -> None:
    base = free_ports(2)
    prefix = '"${IRI_PROXY_BASE}${IRI_CLUSTER_ROLE}${IRI_CLUSTER_ROLE_INDEX}/http/"'
    command = f'exec python3 {echo_script} --port "$IRI_CLUSTER_PORT_HTTP" --prefix {prefix}'
    spec = {
        "name": "pbs-port-proxy-members",
        "executable": "/bin/bash",
        "arguments": ["-c", command],
        "attributes": {"duration": 300},
        "roles": [{"name": "server", "count": 2, "ports": {"http": base}}],
    }
    job_id = launch(gateway, "pbs", spec)
    try:
        ports = {p["member"]: p for p in status(gateway, "pbs", job_id)["meta_data"]["ports"]}
        assert set(ports) == {"server1", "server2"}
        first = check_service(gateway, job_id, "server1", resource="pbs")
        second = check_service(gateway, job_id, "server2", resource="pbs")
        assert first["port"] == base and second["port"] == base + 1
    finally:
        cancel(gateway, "pbs", job_id)
