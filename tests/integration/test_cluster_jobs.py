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
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.jobs.poller import Poller
from iri_gateway.service.operations.store import JobRecord
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
        "container": {
            "image": cluster.test_image,
            "extra_options": {"podman": ["--env=SLURMD_NODENAME"]},
        },
        "attributes": {"duration": 300},
        "roles": [
            {"name": "master", "count": 1},
            {"name": "worker", "count": 3, "arguments": ["-c", worker_script]},
        ],
    }


def node_addresses() -> dict[str, str]:
    """Each Slurm node's address, as Slurm itself has it."""
    shown = subprocess.run(
        ["scontrol", "show", "node", "-o"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    return dict(re.findall(r"NodeName=(\S+) .*?NodeAddr=(\S+)", shown))


def slurm_running(native_id: str) -> bool:
    """Whether Slurm still has the job pending, running or completing."""
    listed = subprocess.run(
        ["squeue", "-h", "-j", native_id, "-o", "%T"], capture_output=True, text=True, timeout=30
    )
    return bool(listed.stdout.strip())


def cluster_folder(record: JobRecord) -> Path:
    return Path(record.effective_spec["directory"]) / f".iri-cluster-{record.native_id}"


def member_output(record: JobRecord, engine: Engine, name: str) -> str:
    if name == "master1":  # the primary: its output is the job's
        return engine.read_output(owner="root", job_id=record.id)
    return (cluster_folder(record) / f"{name}.out").read_text()


def test_members_find_each_other_by_name(cluster_engine: Engine, cluster: ClusterInfo) -> None:
    engine = cluster_engine
    # Every member reports, however quickly the primary does (the default would stop the
    # others when it ends).
    spec = parse_jobspec(
        {**cluster_job(cluster, REPORT, REPORT), "cluster_lifecycle": "all_must_end"}
    )
    record = engine.submit(owner="root", resource_id="cluster", spec=spec).record
    assert record.native_id, record
    record = wait_all_final(engine, [record.id])[record.id]
    assert record.state == JobState.COMPLETED and record.exit_code == 0, record

    addresses = node_addresses()
    reports = {}
    for name in ("master1", "worker1", "worker2", "worker3"):
        role, index, size, node, master_at, worker3_at = member_output(record, engine, name).split()
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
        listed = subprocess.run(
            ["podman", "ps", "-q", "--filter", label],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
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


# Each member serves a page on its own port (busybox httpd), fetches the other member's page
# through IRI_CLUSTER_ENDPOINTS (name:member:port; the member's name is looked up in the
# cluster's hosts file at /etc/hosts by hand: the test image's static busybox crashes in its
# own name lookup and with wget -T), then waits until both have fetched, so neither server
# stops early.
SERVE_AND_FETCH = r"""
me="$IRI_CLUSTER_ROLE$IRI_CLUSTER_ROLE_INDEX"
mkdir -p "/tmp/www-$me"
echo "page of $me" > "/tmp/www-$me/index.html"
httpd -f -p "$IRI_CLUSTER_PORT_HTTP" -h "/tmp/www-$me" &
other=$(echo "$IRI_CLUSTER_ENDPOINTS" | tr , '\n' | grep '^http:' | grep -v ":$me:")
host=$(echo "$other" | cut -d: -f2)
address=$(awk -v name="$host" '$2 == name { print $1 }' /etc/hosts)
port=$(echo "$other" | cut -d: -f3)
page=""
for i in $(seq 1 60); do
    page=$(timeout 5 wget -q -O - "http://$address:$port/") && break
    sleep 0.5
done
echo "$me port=$IRI_CLUSTER_PORT_HTTP endpoints=$IRI_CLUSTER_ENDPOINTS got=$page"
touch "fetched-$me"
for i in $(seq 1 60); do
    [ -e fetched-server1 ] && [ -e fetched-server2 ] && break
    sleep 0.5
done
"""


def test_two_members_on_one_node_serve_their_own_ports_and_reach_each_other(
    cluster_engine: Engine, cluster: ClusterInfo
) -> None:
    engine = cluster_engine
    spec = parse_jobspec(
        {
            "name": "ports-test",
            "executable": "/bin/sh",
            "arguments": ["-c", SERVE_AND_FETCH],
            "container": {
                "image": cluster.test_image,
                "extra_options": {"podman": ["--env=SLURMD_NODENAME"]},
            },
            "attributes": {"duration": 300},
            "cluster_lifecycle": "all_must_end",
            "roles": [
                {
                    "name": "server",
                    "count": 2,
                    "ports": {"http": 18080},
                    "resources": {"processes_per_node": 2},
                }
            ],
        }
    )
    record = engine.submit(owner="root", resource_id="cluster", spec=spec).record
    record = wait_all_final(engine, [record.id], timeout=120)[record.id]
    assert record.state == JobState.COMPLETED and record.exit_code == 0, record

    endpoints = "http:server1:18080,http:server2:18081"
    assert engine.read_output(owner="root", job_id=record.id).strip() == (  # the primary
        f"server1 port=18080 endpoints={endpoints} got=page of server2"
    )
    assert member_output(record, engine, "server2").strip() == (
        f"server2 port=18081 endpoints={endpoints} got=page of server1"
    )
    members = {m["name"]: m for m in record.members}
    assert members["server1"]["node"] == members["server2"]["node"], "co-located"
    address = members["server1"]["address"]
    assert members["server2"]["address"] == address, "one address for both"
    assert members["server1"]["endpoints"] == {"http": f"{address}:18080"}
    assert members["server2"]["endpoints"] == {"http": f"{address}:18081"}


def test_the_primarys_end_ends_long_running_workers(
    cluster_engine: Engine, cluster: ClusterInfo
) -> None:
    """Default `primary_ends_all`: the workers would sleep 300 s; the job ends with the
    primary, and the poller sees it at its next cycle."""
    engine = cluster_engine
    spec = parse_jobspec(cluster_job(cluster, "sleep 300", "sleep 5; echo primary done"))
    record = engine.submit(owner="root", resource_id="cluster", spec=spec).record
    exits = cluster_folder(record) / "exits"
    deadline = time.monotonic() + 90
    while not (exits.exists() and exits.read_text().startswith("master1\t")):
        assert time.monotonic() < deadline, "the primary did not end"
        time.sleep(0.1)
    primary_ended = time.monotonic()
    poller = Poller(engine)  # its own cadence: a running job is polled every 2 * fast s
    slurm_ended = None
    while not (current := engine.store.get(record.id)) or not current.state.final:
        assert time.monotonic() - primary_ended < 30, "the workers ran on"
        if slurm_ended is None and not slurm_running(record.native_id or ""):
            slurm_ended = time.monotonic() - primary_ended
        poller.cycle()
        time.sleep(0.05)
    seen = time.monotonic() - primary_ended
    cycle = 2 * poller.fast
    if slurm_ended is None:
        # Slurm ended the job between the last squeue check and the poll cycle that saw it:
        # it ended no later than the gateway saw it (measured slack as below).
        slurm_ended = seen - 0.5
    assert slurm_ended <= cycle, (
        f"the job ended {slurm_ended:.1f} s after its primary: more than one poll cycle ({cycle} s)"
    )
    assert seen <= slurm_ended + cycle + 0.5, f"seen {seen:.1f} s after the primary's end"
    record = current
    assert record.state == JobState.COMPLETED and record.exit_code == 0, record
    states = {m["name"]: (m["state"], m.get("stopped", False)) for m in record.members}
    assert states == {
        "master1": ("completed", False),
        "worker1": ("completed", True),
        "worker2": ("completed", True),
        "worker3": ("completed", True),
    }
    assert engine.read_output(owner="root", job_id=record.id).strip() == "primary done"
    lines = exits.read_text().splitlines()
    assert lines[0] == "master1\t0"
    assert all(line.endswith("\tstopped") for line in lines[1:]) and len(lines) == 4


def test_restart_of_a_cluster_job_runs_every_member_again(
    cluster_engine: Engine, cluster: ClusterInfo
) -> None:
    """`scontrol requeue` through the gateway's restart: every member appends a line with
    the node it runs on to its own file in the job directory, so a second run shows."""
    engine = cluster_engine
    line = 'echo "run on $SLURMD_NODENAME" >> "runs-$IRI_CLUSTER_ROLE$IRI_CLUSTER_ROLE_INDEX"'
    spec = parse_jobspec({**cluster_job(cluster, line, line), "cluster_lifecycle": "all_must_end"})
    record = engine.submit(owner="root", resource_id="cluster", spec=spec).record
    record = wait_all_final(engine, [record.id], timeout=90)[record.id]
    assert record.state == JobState.COMPLETED, record
    native_id = record.native_id

    restarted = engine.restart(owner="root", job_id=record.id)
    assert restarted.state == JobState.QUEUED and restarted.members == []
    assert restarted.message == f"restart 1: scontrol requeue {native_id}"
    record = wait_all_final(engine, [record.id], timeout=90)[record.id]
    assert record.state == JobState.COMPLETED and record.native_id == native_id, record
    directory = Path(record.effective_spec["directory"])
    for name in ("master1", "worker1", "worker2", "worker3"):
        runs = (directory / f"runs-{name}").read_text().splitlines()
        assert len(runs) == 2 and all(run.startswith("run on n") for run in runs), (name, runs)
    states = [entry["state"] for entry in record.history]
    assert states.count("completed") == 2, record.history
    assert {m["name"]: m["state"] for m in record.members} == dict.fromkeys(
        ("master1", "worker1", "worker2", "worker3"), "completed"
    )


def test_restart_of_a_running_cluster_job_stops_and_runs_every_member_again(
    cluster_engine: Engine, cluster: ClusterInfo
) -> None:
    engine = cluster_engine
    line = 'echo run >> "runs-$IRI_CLUSTER_ROLE$IRI_CLUSTER_ROLE_INDEX"; sleep 300'
    spec = parse_jobspec(cluster_job(cluster, line, line))
    record = engine.submit(owner="root", resource_id="cluster", spec=spec).record
    directory = Path(record.effective_spec["directory"])
    names = ("master1", "worker1", "worker2", "worker3")

    def runs() -> dict[str, int]:
        return {
            name: len((directory / f"runs-{name}").read_text().splitlines())
            if (directory / f"runs-{name}").exists()
            else 0
            for name in names
        }

    deadline = time.monotonic() + 60
    while runs() != dict.fromkeys(names, 1):
        assert time.monotonic() < deadline, f"the members did not start: {runs()}"
        time.sleep(0.5)
    restarted = engine.restart(owner="root", job_id=record.id)
    assert restarted.message == f"restart 1: scontrol requeue {record.native_id}", restarted
    deadline = time.monotonic() + 90
    while runs() != dict.fromkeys(names, 2):
        assert time.monotonic() < deadline, f"the members did not run again: {runs()}"
        time.sleep(0.5)
    engine.cancel(owner="root", job_id=record.id)
    record = wait_all_final(engine, [record.id], timeout=60)[record.id]
    assert record.state == JobState.CANCELED, record
