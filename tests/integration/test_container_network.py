"""`network_mode: "none"` (the IRI container discussion's name) runs a Podman container with
no network on the real test cluster; the same job with the host network sees the node's
interfaces, so the check can tell the two apart."""

from __future__ import annotations

from typing import Any

import pytest

from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.service.jobs.engine import Engine
from tests.integration.conftest import ClusterInfo, wait_all_final

pytestmark = pytest.mark.integration

INTERFACES = "ls /sys/class/net"


def interfaces_job(cluster: ClusterInfo, container: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "network-test",
        "executable": "/bin/sh",
        "arguments": ["-c", INTERFACES],
        "container_runtime": {"image": cluster.test_image, **container},
        "attributes": {"duration": 120},
    }


def interfaces_seen(engine: Engine, document: dict[str, Any]) -> list[str]:
    record = engine.submit(owner="root", resource_id="cluster", spec=parse_jobspec(document)).record
    assert record.native_id, record
    record = wait_all_final(engine, [record.id])[record.id]
    output = engine.read_output(owner="root", job_id=record.id)
    assert record.state == JobState.COMPLETED and record.exit_code == 0, (record, output)
    return output.split()


def test_network_mode_none_leaves_only_loopback(
    cluster_engine: Engine, cluster: ClusterInfo
) -> None:
    isolated = interfaces_seen(cluster_engine, interfaces_job(cluster, {"network_mode": "none"}))
    assert isolated == ["lo"]
    host = interfaces_seen(cluster_engine, interfaces_job(cluster, {}))
    assert "lo" in host and len(host) > 1, f"the host network has more than lo: {host}"
