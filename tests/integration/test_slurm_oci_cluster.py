"""The `slurm-oci` runtime on the real test cluster: Slurm 22.05's `srun --container` with
the rootless runc of scripts/cluster's oci.conf.

`cluster-oci` runs jobs as root (images staged from root's Podman store into root's cache, or
a prepared root filesystem folder), `cluster-oci-ssh` as alice through the SSH login node
(staged from her Podman store into her cache). The cpu test image holds `/etc/iri-flavour`,
which this machine does not have: reading it proves the program ran inside the image.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.errors import JobRejectedError
from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.jobs.poller import Poller
from iri_gateway.service.operations.store import JobRecord
from tests.integration.conftest import ClusterInfo

pytestmark = pytest.mark.integration

FLAVOUR = "/etc/iri-flavour"


@pytest.fixture
def shared_dir(tmp_path: Path) -> Path:
    """A folder every account (root, alice) can use, on the nodes' shared /tmp."""
    folder = Path("/tmp") / f"iri-oci-{tmp_path.name}-{os.getpid()}"
    folder.mkdir(mode=0o777, exist_ok=True)
    folder.chmod(0o777)
    return folder


@pytest.fixture
def root_rootfs(cluster: ClusterInfo, tmp_path: Path) -> Path:
    """A prepared root filesystem folder of the cpu image that root owns (runc makes the
    mount points it lacks in it, which a folder of someone else's would not allow)."""
    folder = tmp_path / "cpu-rootfs"
    subprocess.run(
        ["cp", "-a", "--no-preserve=ownership", str(cluster.dir / "oci/cpu/rootfs"), str(folder)],
        check=True,
        timeout=60,
    )
    return folder


def submit(
    engine: Engine, resource: str, document: dict[str, Any], owner: str = "root"
) -> JobRecord:
    return engine.submit(owner=owner, resource_id=resource, spec=parse_jobspec(document)).record


def wait_for(
    engine: Engine, job_id: str, done: Callable[[JobRecord], bool], timeout: float = 120
) -> JobRecord:
    poller = Poller(engine)
    deadline = time.monotonic() + timeout
    while True:
        poller.cycle(force=True)
        record = engine.store.get(job_id)
        assert record is not None
        if done(record):
            return record
        assert time.monotonic() < deadline, f"{job_id} not there in {timeout} s: {record}"
        time.sleep(0.3)


def finished(engine: Engine, record: JobRecord, owner: str = "root") -> tuple[str, str]:
    record = wait_for(engine, record.id, lambda r: r.state.final)
    out = engine.read_output(owner=owner, job_id=record.id)
    err = engine.read_output(owner=owner, job_id=record.id, stream="stderr")
    assert record.state == JobState.COMPLETED, (record.state, record.message, out, err)
    return out, err


def test_this_machine_has_no_flavour_file() -> None:
    assert not Path(FLAVOUR).exists(), "the in-image proof needs a file the host lacks"


def test_bare_container_job_runs_in_the_staged_image(
    cluster_engine: Engine, cluster: ClusterInfo
) -> None:
    record = submit(
        cluster_engine,
        "cluster-oci",
        {
            "executable": "/bin/cat",
            "arguments": [FLAVOUR],
            "container": {"image": cluster.image_cpu},
        },
    )
    assert record.plan["runtime"] == "slurm-oci"
    assert '--nodes=1 --ntasks=1 --ntasks-per-node=1 "--container=$iri_oci_bundle"' in (
        record.script
    )
    out, _ = finished(cluster_engine, record)
    assert out == "cpu\n"
    # The bundle was the job's own and is gone; the staged root filesystem stays cached.
    directory = Path(record.effective_spec.get("directory") or "/")
    assert not list(directory.glob(f".iri-oci-*-{record.native_id}"))


def test_read_only_and_read_write_mounts(
    cluster_engine: Engine, shared_dir: Path, root_rootfs: Path
) -> None:
    (shared_dir / "in").mkdir()
    (shared_dir / "in/input.txt").write_text("mounted input\n")
    (shared_dir / "out").mkdir()
    script = (
        "cat /data/in/input.txt; cat " + FLAVOUR + "; "
        "if echo no > /data/in/x 2>/dev/null; then echo ro-writable; else echo ro-refused; "
        "fi; echo written > /data/out/result.txt && echo rw-ok"
    )
    record = submit(
        cluster_engine,
        "cluster-oci",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", script],
            "directory": str(shared_dir),
            "container": {
                "image": f"{root_rootfs}/",
                "volume_mounts": [
                    {"source": str(shared_dir / "in"), "target": "/data/in", "read_only": True},
                    {"source": str(shared_dir / "out"), "target": "/data/out", "read_only": False},
                ],
            },
        },
    )
    assert record.plan["image_form"] == "sandbox"
    out, _ = finished(cluster_engine, record)
    assert out == "mounted input\ncpu\nro-refused\nrw-ok\n"
    assert (shared_dir / "out/result.txt").read_text() == "written\n"
    assert not (shared_dir / "in/x").exists()


def test_environment_and_working_directories(
    cluster_engine: Engine, cluster: ClusterInfo, shared_dir: Path
) -> None:
    hostile = "a 'b' \"c\" $(touch /tmp/pwned-oci) `id` \\ ; *"
    report = 'echo "V=[$V]"; echo "PATH=$PATH"; pwd; cat marker.txt'
    (shared_dir / "marker.txt").write_text("the job directory\n")
    in_job_dir = submit(
        cluster_engine,
        "cluster-oci",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", report],
            "environment": {"V": hostile, "PATH": "/bin:/usr/bin"},
            "directory": str(shared_dir),
            "container": {"image": cluster.image_cpu},
        },
    )
    in_workdir = submit(
        cluster_engine,
        "cluster-oci",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", "pwd; cat iri-flavour"],
            "directory": str(shared_dir),
            "container": {"image": cluster.image_cpu, "workdir": "/etc"},
        },
    )
    out, _ = finished(cluster_engine, in_job_dir)
    assert out.splitlines() == [
        f"V=[{hostile}]",
        "PATH=/bin:/usr/bin",
        str(shared_dir),
        "the job directory",
    ]
    assert not Path("/tmp/pwned-oci").exists()
    out, _ = finished(cluster_engine, in_workdir)
    assert out == "/etc\ncpu\n"


def test_failing_exit_code(cluster_engine: Engine, cluster: ClusterInfo) -> None:
    record = submit(
        cluster_engine,
        "cluster-oci",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", f"test -e {FLAVOUR} && exit 7"],
            "container": {"image": cluster.image_cpu},
        },
    )
    record = wait_for(cluster_engine, record.id, lambda r: r.state.final)
    assert record.state == JobState.FAILED and record.exit_code == 7, record


def _processes(pattern: str) -> str:
    listed = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True, timeout=30)
    return listed.stdout.strip()


def _runc_containers(root: str, job: str) -> list[str]:
    listed = subprocess.run(
        ["runc", "--root", root, "list", "-q"], capture_output=True, text=True, timeout=30
    )
    return [name for name in listed.stdout.split() if f".{job}." in name]


def test_cancel_leaves_no_process_on_the_node(
    cluster_engine: Engine, cluster: ClusterInfo, shared_dir: Path
) -> None:
    marker = f"sleep {3000 + os.getpid() % 900}"
    record = submit(
        cluster_engine,
        "cluster-oci",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", f"echo started; exec {marker}"],
            "directory": str(shared_dir),
            "resources": {"node_count": 2, "process_count": 2},
            "container": {"image": cluster.image_cpu},
        },
    )
    wait_for(cluster_engine, record.id, lambda r: r.state == JobState.ACTIVE)
    output = shared_dir / f"iri-{record.id}.out"
    deadline = time.monotonic() + 60
    while not output.exists() or output.read_text().count("started") < 2:
        assert time.monotonic() < deadline, "the containers did not start"
        time.sleep(0.3)
    assert _processes(marker), "the program runs before the cancel"
    assert len(_runc_containers("/run/user/0/runc", record.native_id or "")) == 2
    cluster_engine.cancel(owner="root", job_id=record.id)
    record = wait_for(cluster_engine, record.id, lambda r: r.state.final)
    assert record.state == JobState.CANCELED
    deadline = time.monotonic() + 30
    while _processes(marker) or _runc_containers("/run/user/0/runc", record.native_id or ""):
        assert time.monotonic() < deadline, (
            f"left behind: {_processes(marker)!r}, "
            f"{_runc_containers('/run/user/0/runc', record.native_id or '')}"
        )
        time.sleep(0.5)


def test_two_nodes_one_task_each(cluster_engine: Engine, cluster: ClusterInfo) -> None:
    record = submit(
        cluster_engine,
        "cluster-oci",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", f'echo "$(cat {FLAVOUR}) $SLURM_JOB_ID"'],
            "resources": {"node_count": 2, "process_count": 2},
            "container": {"image": cluster.image_cpu},
        },
    )
    assert "#SBATCH --nodes=2" in record.script
    out, _ = finished(cluster_engine, record)
    # The fake nodes share one host name, and 22.05 gives no SLURM_PROCID inside: the two
    # tasks are counted, not named.
    assert out.splitlines() == [f"cpu {record.native_id}"] * 2
    nodes = subprocess.run(
        ["sacct", "-n", "-X", "-j", record.native_id or "", "-o", "NNodes"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    assert nodes.split() in ([], ["2"])  # sacct may lack a job log here; the script asked 2


def test_two_tasks_on_one_node_are_refused(cluster_engine: Engine, cluster: ClusterInfo) -> None:
    with pytest.raises(JobRejectedError) as caught:
        submit(
            cluster_engine,
            "cluster-oci",
            {
                "executable": "/bin/true",
                "resources": {"node_count": 1, "process_count": 2},
                "container": {"image": cluster.image_cpu},
            },
        )
    (problem,) = caught.value.problems
    assert problem.field == "resources.process_count"
    assert "one container task per node" in problem.reason


def test_over_the_ssh_login_node_as_alice(cluster_engine: Engine, cluster: ClusterInfo) -> None:
    record = submit(
        cluster_engine,
        "cluster-oci-ssh",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", f'cat {FLAVOUR}; echo "W=$W"; pwd'],
            "environment": {"W": "it's $HOME"},
            "container": {"image": cluster.image_cpu},
        },
        owner="alice",
    )
    out, _ = finished(cluster_engine, record, owner="alice")
    lines = out.splitlines()
    assert lines[:2] == ["cpu", "W=it's $HOME"]
    assert lines[2].startswith("/home/"), lines
    # Staged by alice, as alice, into her own cache.
    cached = list(Path("/home/alice/.cache/iri-gateway/oci").glob("*"))
    assert cached and all(path.owner() == "alice" for path in cached), cached


def test_cluster_job_members_each_run_in_their_own_bundle(
    cluster_engine: Engine, cluster: ClusterInfo, shared_dir: Path
) -> None:
    report = (
        f'echo "$IRI_CLUSTER_ROLE$IRI_CLUSTER_ROLE_INDEX $(cat {FLAVOUR}) '
        '$(awk \'$2 == "worker1" { print "found" }\' /etc/hosts)"'
    )
    record = submit(
        cluster_engine,
        "cluster-oci",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", report],
            "directory": str(shared_dir),
            "container": {"image": cluster.image_cpu},
            "cluster_lifecycle": "all_must_end",
            "roles": [{"name": "master", "count": 1}, {"name": "worker", "count": 1}],
        },
    )
    out, _ = finished(cluster_engine, record)
    assert out == "master1 cpu found\n"
    folder = shared_dir / f".iri-cluster-{record.native_id}"
    assert (folder / "worker1.out").read_text() == "worker1 cpu found\n"
