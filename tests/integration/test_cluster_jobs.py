"""Cluster jobs on the real test cluster: 1 master + 3 workers in Podman, one Slurm het job.

Every member reports its role, index, the cluster size, the Slurm node it really runs on (the
step's SLURMD_NODENAME, passed into the container through the allowed escape hatch) and the
addresses that `master1` and `worker3` resolve to in its /etc/hosts. The test cluster's nodes
have distinct loopback addresses (127.0.2.N), so "name -> node" has one right answer, which
the test takes from Slurm itself (`scontrol show node`), not from the gateway.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.service.engine import Engine
from iri_gateway.service.store import JobRecord
from tests.integration.conftest import ClusterInfo, wait_all_final

pytestmark = pytest.mark.integration

REPORT = (
    'printf "%s %s %s %s %s %s\\n" "$IRI_CLUSTER_ROLE" "$IRI_CLUSTER_ROLE_INDEX" '
    '"$IRI_CLUSTER_SIZE" "$SLURMD_NODENAME" '
    '"$(awk \'$2 == "master1" { print $1 }\' /etc/hosts)" '
    '"$(awk \'$2 == "worker3" { print $1 }\' /etc/hosts)"'
)


def cluster_job(cluster: ClusterInfo, worker_script: str, master_script: str) -> dict[str, Any]:
    return {
        "name": "roles-test",
        "executable": "/bin/sh",
        "arguments": ["-c", master_script],
        "container": {"image": cluster.test_image,
                      "extra_options": {"podman": ["--env=SLURMD_NODENAME"]}},
        "attributes": {"duration": 300},
        "roles": [
            {"name": "master", "count": 1},
            {"name": "worker", "count": 3, "arguments": ["-c", worker_script]},
        ],
    }


def node_addresses() -> dict[str, str]:
    """Each Slurm node's address, as Slurm itself has it."""
    shown = subprocess.run(["scontrol", "show", "node", "-o"], capture_output=True, text=True,
                           check=True, timeout=30).stdout
    return dict(re.findall(r"NodeName=(\S+) .*?NodeAddr=(\S+)", shown))


def cluster_folder(record: JobRecord) -> Path:
    return Path(record.effective_spec["directory"]) / f".iri-cluster-{record.native_id}"


def member_output(record: JobRecord, engine: Engine, name: str) -> str:
    if name == "master1":  # the primary: its output is the job's
        return engine.read_output(owner="root", job_id=record.id)
    return (cluster_folder(record) / f"{name}.out").read_text()


def test_members_find_each_other_by_name(cluster_engine: Engine, cluster: ClusterInfo) -> None:
    engine = cluster_engine
    spec = parse_jobspec(cluster_job(cluster, REPORT, REPORT))
    record = engine.submit(owner="root", resource_id="cluster", spec=spec).record
    assert record.native_id, record
    record = wait_all_final(engine, [record.id])[record.id]
    assert record.state == JobState.COMPLETED and record.exit_code == 0, record

    addresses = node_addresses()
    reports = {}
    for name in ("master1", "worker1", "worker2", "worker3"):
        role, index, size, node, master_at, worker3_at = member_output(
            record, engine, name).split()
        assert (role, size) == (name.rstrip("0123456789"), "4")
        assert f"{role}{index}" == name
        reports[name] = (node, master_at, worker3_at)
    nodes = {name: node for name, (node, _, _) in reports.items()}
    assert sorted(nodes.values()) == ["n1", "n2", "n3", "n4"], "one member per node"
    for name, (_, master_at, worker3_at) in reports.items():
        assert master_at == addresses[nodes["master1"]], f"{name}: master1 is where it ran"
        assert worker3_at == addresses[nodes["worker3"]], f"{name}: worker3 is where it ran"
    assert len(set(addresses.values())) == 4, "the nodes' addresses tell them apart"

    # The gateway's record of the members agrees with where they really ran.
    members = {m["name"]: m for m in record.members}
    assert {name: m["node"] for name, m in members.items()} == nodes
    assert all(m["state"] == "completed" and m["exit_code"] == 0 for m in members.values())


def test_a_failing_worker_fails_the_job_and_is_named(
    cluster_engine: Engine, cluster: ClusterInfo
) -> None:
    engine = cluster_engine
    worker = 'if [ "$IRI_CLUSTER_ROLE_INDEX" = 2 ]; then exit 1; fi; sleep 60'
    spec = parse_jobspec(cluster_job(cluster, worker, "sleep 60"))
    record = engine.submit(owner="root", resource_id="cluster", spec=spec).record
    record = wait_all_final(engine, [record.id], timeout=60)[record.id]
    assert record.state == JobState.FAILED and record.exit_code == 1, record
    assert record.message is not None
    assert record.message.startswith("member worker2 (role worker, on "), record.message
    assert "exited with 1" in record.message
    states = {m["name"]: m["state"] for m in record.members}
    assert states["worker2"] == "failed"
    exits = (cluster_folder(record) / "exits").read_text().splitlines()
    assert exits[0] == "worker2\t1", "the failure is recorded first; the others were stopped"
    assert len(exits) == 4


def test_cancel_stops_every_member(cluster_engine: Engine, cluster: ClusterInfo) -> None:
    engine = cluster_engine
    spec = parse_jobspec(cluster_job(cluster, "sleep 300", "sleep 300"))
    record = engine.submit(owner="root", resource_id="cluster", spec=spec).record
    label = f"label=iri-slurm-job={record.native_id}"

    def containers() -> list[str]:
        listed = subprocess.run(["podman", "ps", "-q", "--filter", label], capture_output=True,
                                text=True, check=True, timeout=30)
        return listed.stdout.split()

    deadline = time.monotonic() + 60
    while len(containers()) < 4:
        assert time.monotonic() < deadline, "the four members did not start"
        time.sleep(0.5)
    engine.cancel(owner="root", job_id=record.id)
    record = wait_all_final(engine, [record.id], timeout=60)[record.id]
    assert record.state == JobState.CANCELED, record
    deadline = time.monotonic() + 30
    while containers():
        assert time.monotonic() < deadline, f"members still running: {containers()}"
        time.sleep(0.5)
