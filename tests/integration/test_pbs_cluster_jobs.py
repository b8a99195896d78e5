"""Cluster jobs (roles) on the real OpenPBS 23.06.06 (scripts/pbs): one master and two
workers in Podman on the PBS test profile's `pbs` resource.

The job asks for one `select` chunk per role (joined with '+') with `place=scatter`, so PBS
gives every member a vnode of its own among pbs-n1..pbs-n4; the script reads $PBS_NODEFILE and
starts each member with `mpiexec -n 1 --hosts HOST` (Hydra's fork launcher here: every vnode
is this machine). What the real server showed: $PBS_NODEFILE names the MOM's host (`pbshost`)
on every line, not the vnodes' `host` resource, so the members all have the one address of
this machine, and the vnodes PBS chose are only in the job's `exec_vnode`. The members find
each other by name through the cluster's hosts file bound at /etc/hosts.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.operations.store import JobRecord
from tests.integration.conftest import PbsInfo, wait_all_final
from tests.integration.test_cluster_jobs import SERVE_AND_FETCH, cluster_folder, member_output

pytestmark = pytest.mark.integration

# Every member reports its role, index, the cluster's size and names, and the addresses
# master1 and worker2 have in its /etc/hosts (the cluster's hosts file).
REPORT = (
    'printf "%s %s %s %s %s %s\\n" "$IRI_CLUSTER_ROLE" "$IRI_CLUSTER_ROLE_INDEX" '
    '"$IRI_CLUSTER_SIZE" "$IRI_CLUSTER_HOSTS" '
    '"$(awk \'$2 == "master1" { print $1 }\' /etc/hosts)" '
    '"$(awk \'$2 == "worker2" { print $1 }\' /etc/hosts)"'
)
NAMES = ("master1", "worker1", "worker2")


def cluster_job(
    pbs: PbsInfo, directory: Path, worker_script: str, master_script: str, **extra: Any
) -> dict[str, Any]:
    """A master and two workers in the test image, the job's directory bound into each."""
    return {
        "name": "roles-test",
        "executable": "/bin/sh",
        "arguments": ["-c", master_script],
        "directory": str(directory),
        "container": {"image": pbs.cluster.test_image},
        "attributes": {"duration": 300},
        "roles": [
            {"name": "master", "count": 1},
            {"name": "worker", "count": 2, "arguments": ["-c", worker_script]},
        ],
        **extra,
    }


@pytest.fixture
def job_dir() -> Iterator[Path]:
    """A job directory in /tmp, the `pbs` resource's files root (pytest's own folders are
    not: the gateway refuses them)."""
    folder = Path(tempfile.mkdtemp(prefix="iri-pbs-cluster-")).resolve()
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def engine(pbs_engine: Engine) -> Iterator[Engine]:
    yield pbs_engine


def qstat(native_id: str) -> dict[str, Any]:
    shown = subprocess.run(
        ["qstat", "-x", "-f", "-F", "json", native_id], capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    jobs: dict[str, Any] = json.loads(shown.stdout)["Jobs"]
    assert len(jobs) == 1, jobs
    attributes: dict[str, Any] = next(iter(jobs.values()))
    return attributes


def vnodes(native_id: str) -> list[str]:
    """The vnodes of each chunk, in select order, as PBS placed them (`exec_vnode`)."""
    return re.findall(r"\(([^:)]+):", qstat(native_id)["exec_vnode"])


def submit(engine: Engine, document: dict[str, Any]) -> JobRecord:
    record = engine.submit(owner="root", resource_id="pbs", spec=parse_jobspec(document)).record
    assert record.native_id, record
    return record


def test_members_find_each_other_by_name_on_vnodes_of_their_own(
    engine: Engine, pbs: PbsInfo, job_dir: Path
) -> None:
    spec = cluster_job(pbs, job_dir, REPORT, REPORT, cluster_lifecycle="all_must_end")
    record = submit(engine, spec)
    select = [line for line in record.script.split("\n") if line.startswith("#PBS -l select=")]
    # Exclusive by default: whole vnodes (2 CPUs), one chunk kind per role.
    assert select == ["#PBS -l select=1:ncpus=2:mpiprocs=1+2:ncpus=2:mpiprocs=1"], select
    assert "#PBS -l place=scatter:excl" in record.script.split("\n")
    record = wait_all_final(engine, [record.id])[record.id]
    assert record.state == JobState.COMPLETED and record.exit_code == 0, record

    placed = vnodes(record.native_id or "")
    assert len(placed) == 3 and len(set(placed)) == 3, f"a vnode of its own each: {placed}"
    assert set(placed) <= {"pbs-n1", "pbs-n2", "pbs-n3", "pbs-n4", "pbshost"}, placed
    members = {m["name"]: m for m in record.members}
    assert sorted(members) == sorted(NAMES), record.members
    for name in NAMES:
        role, index, size, hosts, master_at, worker2_at = member_output(
            record, engine, name
        ).split()
        assert (f"{role}{index}", size, hosts) == (name, "3", ",".join(NAMES))
        assert master_at == members["master1"]["address"], name
        assert worker2_at == members["worker2"]["address"], name
    assert all(m["state"] == "completed" and m["exit_code"] == 0 for m in members.values())
    assert {m["node"] for m in members.values()} == {pbs.host}, "$PBS_NODEFILE's host"


def test_a_failing_worker_fails_the_job_and_is_named(
    engine: Engine, pbs: PbsInfo, job_dir: Path
) -> None:
    """The other members are stopped, and no container is left once the job has ended. A
    member stopped while its container was still starting kept running after the job in one
    run of four before scripts/pbs gave the MOM an epilogue (the TERM reaches `podman run`
    before its signal proxy is up, and the container, a child of conmon, is outside the
    job's session): the epilogue removes the containers labelled with the job's id."""
    worker = 'if [ "$IRI_CLUSTER_ROLE_INDEX" = 2 ]; then exit 3; fi; sleep 60'
    record = submit(engine, cluster_job(pbs, job_dir, worker, "sleep 60"))
    record = wait_all_final(engine, [record.id], timeout=90)[record.id]
    assert record.state == JobState.FAILED and record.exit_code == 3, record
    assert record.message is not None
    assert record.message.startswith(f"member worker2 (role worker, on {pbs.host}"), record.message
    assert "exited with 3" in record.message
    states = {m["name"]: m["state"] for m in record.members}
    assert states["worker2"] == "failed", record.members
    exits = (cluster_folder(record) / "exits").read_text().splitlines()
    assert exits[0] == "worker2\t3", "the failure is recorded first; the others were stopped"
    assert len(exits) == 3 and all(line.endswith("\tstopped") for line in exits[1:]), exits
    deadline = time.monotonic() + 60
    while containers(job_dir):
        assert time.monotonic() < deadline, f"members still running: {containers(job_dir)}"
        time.sleep(0.5)


def started(job_dir: Path) -> list[str]:
    """Members that reached their `sleep` (each touched a file named after it)."""
    return sorted(path.name.removeprefix("started-") for path in job_dir.glob("started-*"))


def containers(job_dir: Path) -> list[str]:
    """The Podman containers still there that bind the job's directory (every member's)."""
    listed = subprocess.run(
        ["podman", "ps", "-q", "--filter", f"volume={job_dir}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return listed.stdout.split()


def test_cancel_ends_every_member(engine: Engine, pbs: PbsInfo, job_dir: Path) -> None:
    """qdel through the gateway's cancel: the job ends canceled and no member's container
    is left running."""
    line = 'touch "started-$IRI_CLUSTER_ROLE$IRI_CLUSTER_ROLE_INDEX"; sleep 300'
    record = submit(engine, cluster_job(pbs, job_dir, line, line))
    deadline = time.monotonic() + 90
    while started(job_dir) != sorted(NAMES) or len(containers(job_dir)) < 3:
        assert time.monotonic() < deadline, (
            f"not all members running: started {started(job_dir)}, containers "
            f"{containers(job_dir)}, {engine.store.get(record.id)}"
        )
        time.sleep(0.5)
    engine.cancel(owner="root", job_id=record.id)
    record = wait_all_final(engine, [record.id], timeout=90)[record.id]
    assert record.state == JobState.CANCELED, record
    deadline = time.monotonic() + 60
    while containers(job_dir):
        assert time.monotonic() < deadline, f"members still running: {containers(job_dir)}"
        time.sleep(0.5)


def test_two_members_on_one_vnode_serve_their_own_ports_and_reach_each_other(
    engine: Engine, pbs: PbsInfo, job_dir: Path
) -> None:
    """One chunk of `mpiprocs=2`: $PBS_NODEFILE lists its host twice, one line per member;
    each member serves its own port (IRI_CLUSTER_PORT_HTTP) and fetches the other's page
    through IRI_CLUSTER_ENDPOINTS."""
    spec = cluster_job(pbs, job_dir, "", SERVE_AND_FETCH, cluster_lifecycle="all_must_end")
    spec["roles"] = [
        {
            "name": "server",
            "count": 2,
            "ports": {"http": 18180},
            "resources": {"processes_per_node": 2},
        }
    ]
    record = submit(engine, spec)
    assert "#PBS -l select=1:ncpus=2:mpiprocs=2" in record.script.split("\n")
    record = wait_all_final(engine, [record.id], timeout=120)[record.id]
    assert record.state == JobState.COMPLETED and record.exit_code == 0, record
    endpoints = "http:server1:18180,http:server2:18181"
    assert engine.read_output(owner="root", job_id=record.id).strip() == (
        f"server1 port=18180 endpoints={endpoints} got=page of server2"
    )
    assert member_output(record, engine, "server2").strip() == (
        f"server2 port=18181 endpoints={endpoints} got=page of server1"
    )
    members = {m["name"]: m for m in record.members}
    address = members["server1"]["address"]
    assert members["server1"]["endpoints"] == {"http": f"{address}:18180"}
    assert members["server2"]["endpoints"] == {"http": f"{address}:18181"}
