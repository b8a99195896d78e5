"""The engine against the real test cluster: Slurm on this machine and through SSH, Podman.

Every test submits through `Engine.submit` (plan, record, sbatch) and tracks through the
poller (one batched squeue per cycle), exactly as the gateway does in production.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.errors import SubmitError
from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.jobs.poller import Poller
from iri_gateway.service.operations.store import JobRecord
from iri_gateway.transport.scripted import ScriptedTransport
from iri_gateway.transport.ssh import HostKeyError, SshTransport
from tests.conftest import stored_plan
from tests.integration.conftest import ClusterInfo, make_engine

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parent.parent.parent


@pytest.fixture(scope="module")
def profile(cluster_profile: Path) -> Path:
    return cluster_profile


@pytest.fixture
def engine(cluster_engine: Engine) -> Engine:
    return cluster_engine


@pytest.fixture
def shared_dir(tmp_path: Path) -> Path:
    """A folder every account (root, alice, containers) can use."""
    folder = Path("/tmp") / f"iri-it-{tmp_path.name}-{os.getpid()}"
    folder.mkdir(mode=0o777, exist_ok=True)
    folder.chmod(0o777)
    return folder


def wait_for(
    engine: Engine, job_id: str, done: Callable[[JobRecord], bool], timeout: float = 90
) -> JobRecord:
    poller = Poller(engine)
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while time.monotonic() < deadline:
        poller.cycle(force=True)
        record = engine.store.get(job_id)
        assert record is not None
        if not seen or seen[-1] != record.state.value:
            seen.append(record.state.value)
        if done(record):
            return record
        time.sleep(0.3)
    raise AssertionError(f"{job_id}: states seen {seen}; last {engine.store.get(job_id)}")


def submit(
    engine: Engine, resource: str, document: dict[str, Any], owner: str = "root"
) -> JobRecord:
    return engine.submit(owner=owner, resource_id=resource, spec=parse_jobspec(document)).record


def test_bare_job_goes_queued_active_completed(engine: Engine) -> None:
    record = submit(
        engine,
        "cluster",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", "sleep 2; echo done on $SLURMD_NODENAME"],
            "attributes": {"duration": 60},
        },
    )
    assert record.state == JobState.QUEUED and record.native_id
    wait_for(engine, record.id, lambda r: r.state == JobState.ACTIVE)
    record = wait_for(engine, record.id, lambda r: r.state.final)
    assert record.state == JobState.COMPLETED and record.exit_code == 0
    states = [h["state"] for h in record.history]
    assert states.index("queued") < states.index("active") < states.index("completed")
    assert engine.read_output(owner="root", job_id=record.id).startswith("done on n")


def test_podman_container_job_inside_slurm(engine: Engine, shared_dir: Path) -> None:
    (shared_dir / "input.txt").write_text("mounted input\n")
    record = submit(
        engine,
        "cluster",
        {
            "executable": "/bin/sh",
            "arguments": [
                "-c",
                'cat /data/input.txt; echo "$GREETING"; pwd; '
                "cat /etc/hostname >/dev/null; echo written > /out/result.txt",
            ],
            "environment": {"GREETING": "hello 'container' $(x)"},
            "directory": str(shared_dir),
            "container": {
                "image": "localhost/iri-test/busybox:latest",
                "network": "none",
                "workdir": "/data",
                "volume_mounts": [
                    {"source": str(shared_dir), "target": "/data", "read_only": True},
                    {"source": str(shared_dir), "target": "/out", "read_only": False},
                ],
            },
        },
    )
    record = wait_for(engine, record.id, lambda r: r.state.final)
    out = engine.read_output(owner="root", job_id=record.id)
    err = engine.read_output(owner="root", job_id=record.id, stream="stderr")
    assert record.state == JobState.COMPLETED, out + err
    assert out == "mounted input\nhello 'container' $(x)\n/data\n"
    assert (shared_dir / "result.txt").read_text() == "written\n"


def test_network_none_really_has_no_network(engine: Engine) -> None:
    record = submit(
        engine,
        "cluster",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", "ls /sys/class/net"],
            "container": {"image": "localhost/iri-test/busybox:latest", "network": "none"},
        },
    )
    record = wait_for(engine, record.id, lambda r: r.state.final)
    assert engine.read_output(owner="root", job_id=record.id).split() == ["lo"]


def test_cdi_device_reaches_the_container(engine: Engine) -> None:
    record = submit(
        engine,
        "cluster-gpu",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", 'echo "gpu=$IRI_FAKE_GPU"'],
            "resources": {"gpu_cores_per_process": 1},
            "container": {
                "image": "localhost/iri-test/busybox:latest",
                "devices": ["example.com/gpu=0"],
            },
        },
    )
    record = wait_for(engine, record.id, lambda r: r.state.final)
    out = engine.read_output(owner="root", job_id=record.id)
    assert record.state == JobState.COMPLETED, engine.read_output(
        owner="root", job_id=record.id, stream="stderr"
    )
    assert out.strip() == "gpu=0"


def test_failing_job_is_failed_with_its_exit_code(engine: Engine) -> None:
    record = submit(engine, "cluster", {"executable": "/bin/sh", "arguments": ["-c", "exit 3"]})
    record = wait_for(engine, record.id, lambda r: r.state.final)
    assert record.state == JobState.FAILED and record.exit_code == 3
    assert "FAILED" in (record.message or "")


def test_cancel_reports_canceled(engine: Engine) -> None:
    record = submit(engine, "cluster", {"executable": "/bin/sleep", "arguments": ["120"]})
    wait_for(engine, record.id, lambda r: r.state == JobState.ACTIVE)
    engine.cancel(owner="root", job_id=record.id)
    record = wait_for(engine, record.id, lambda r: r.state.final)
    assert record.state == JobState.CANCELED


def test_three_gpus_refused_by_slurm_in_its_own_words(engine: Engine) -> None:
    with pytest.raises(SubmitError) as caught:
        submit(
            engine,
            "cluster-gpu-overclaimed",
            {
                "executable": "/bin/true",
                "resources": {"gpu_cores_per_process": 3},
            },
        )
    assert "Requested node configuration is not available" in caught.value.stderr
    (record,) = engine.store.find()
    assert record.state == JobState.FAILED
    assert "Requested node configuration is not available" in (record.message or "")


def test_gpu_job_sees_cuda_visible_devices(engine: Engine) -> None:
    record = submit(
        engine,
        "cluster-gpu",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", 'echo "cvd=$CUDA_VISIBLE_DEVICES"'],
            "resources": {"gpu_cores_per_process": 1, "exclusive_node_use": False},
        },
    )
    record = wait_for(engine, record.id, lambda r: r.state.final)
    assert engine.read_output(owner="root", job_id=record.id).strip() in ("cvd=0", "cvd=1")
    exclusive = submit(
        engine,
        "cluster-gpu",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", 'echo "cvd=$CUDA_VISIBLE_DEVICES"'],
            "resources": {"gpu_cores_per_process": 1},
        },
    )
    exclusive = wait_for(engine, exclusive.id, lambda r: r.state.final)
    whole_node = engine.read_output(owner="root", job_id=exclusive.id).strip()
    assert whole_node == "cvd=0,1", "an exclusive node brings all its GPUs"


def test_two_node_job_runs_on_two_nodes(engine: Engine) -> None:
    record = submit(
        engine,
        "cluster",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", 'echo "$SLURMD_NODENAME"'],
            "resources": {"node_count": 2, "processes_per_node": 1, "exclusive_node_use": False},
        },
    )
    record = wait_for(engine, record.id, lambda r: r.state.final)
    nodes = engine.read_output(owner="root", job_id=record.id).split()
    assert len(nodes) == 2 and len(set(nodes)) == 2 and all(n.startswith("n") for n in nodes)


def test_over_ssh_bare_and_rootless_podman(engine: Engine) -> None:
    bare = submit(
        engine,
        "cluster-ssh",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", "id -un"],
        },
        owner="alice",
    )
    podman = submit(
        engine,
        "cluster-ssh",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", "echo inside; cat /etc/os-release || true"],
            "container": {"image": "localhost/iri-test/busybox:latest"},
        },
        owner="alice",
    )
    for record in (bare, podman):
        done = wait_for(engine, record.id, lambda r: r.state.final)
        assert done.state == JobState.COMPLETED, engine.read_output(
            owner="alice", job_id=record.id, stream="stderr"
        )
    assert engine.read_output(owner="alice", job_id=bare.id).strip() == "alice"
    assert engine.read_output(owner="alice", job_id=podman.id).startswith("inside\n")


def test_unmapped_user_is_refused_on_ssh_resources(engine: Engine) -> None:
    from iri_gateway.service.operations.backends import NoAccountError

    with pytest.raises(NoAccountError, match="'mallory' has no account") as refused:
        submit(engine, "cluster-ssh", {"executable": "/bin/true"}, owner="mallory")
    assert "alice" not in str(refused.value), "who else is mapped is not told"


def test_wrong_host_key_is_refused(cluster: ClusterInfo, tmp_path: Path) -> None:
    wrong = tmp_path / "known_hosts"
    key = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")],
        capture_output=True,
        timeout=30,
    )
    assert key.returncode == 0
    public = (tmp_path / "other.pub").read_text().split()
    wrong.write_text(f"[127.0.0.1]:{cluster.ssh_port} {public[0]} {public[1]}\n")
    transport = SshTransport(
        host="127.0.0.1",
        port=cluster.ssh_port,
        username=cluster.ssh_user,
        known_hosts=str(wrong),
        key_file=str(cluster.ssh_key),
    )
    with pytest.raises(HostKeyError, match="does not match"):
        transport.run(["true"])
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    transport = SshTransport(
        host="127.0.0.1",
        port=cluster.ssh_port,
        username=cluster.ssh_user,
        known_hosts=str(empty),
        key_file=str(cluster.ssh_key),
    )
    with pytest.raises(HostKeyError, match="not in"):
        transport.run(["true"])


def test_dropped_connection_mid_poll_recovers(engine: Engine) -> None:
    record = submit(
        engine, "cluster-ssh", {"executable": "/bin/sleep", "arguments": ["5"]}, owner="alice"
    )
    transport = engine.backends.get(engine.registry.get("cluster-ssh"), "alice").transport
    assert isinstance(transport, SshTransport)
    engine.refresh("cluster-ssh")
    (client,) = transport.connections()
    ssh_transport = client.get_transport()
    assert ssh_transport is not None
    ssh_transport.sock.close()  # the network drops under the open connection
    engine.refresh("cluster-ssh")  # reconnects (idempotent status query) and goes on
    assert client not in transport.connections()
    done = wait_for(engine, record.id, lambda r: r.state.final)
    assert done.state == JobState.COMPLETED


CRASHING_SUBMITTER = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.integration.conftest import make_engine
from iri_gateway.planning.jobspec_io import parse_jobspec

engine = make_engine(Path({profile!r}), Path({data!r}))
def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
engine.store.set_native_id = die  # sbatch has returned; the record never learns the id
engine.submit(owner="root", resource_id="cluster",
              spec=parse_jobspec({{"executable": "/bin/sh", "arguments": ["-c", "echo once"]}}))
"""


def jobs_tagged(tag: str) -> list[str]:
    out = subprocess.run(
        ["squeue", "--me", "-h", "-t", "all", "-o", "%i|%k"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return [line.split("|")[0] for line in out.splitlines() if line.split("|")[1] == tag]


def test_crash_between_sbatch_and_record_update_is_adopted_once(
    profile: Path, tmp_path: Path
) -> None:
    script = CRASHING_SUBMITTER.format(root=str(ROOT), profile=str(profile), data=str(tmp_path))
    crashed = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    engine = make_engine(profile, tmp_path)
    (lost,) = engine.store.unsettled()
    assert lost.native_id is None
    assert len(jobs_tagged(lost.tag)) == 1, "the scheduler has it once"
    (action,) = engine.reconcile()
    assert action.startswith(f"{lost.id}: adopted ")
    assert engine.reconcile() == []
    done = wait_for(engine, lost.id, lambda r: r.state.final)
    assert done.state == JobState.COMPLETED
    assert engine.read_output(owner="root", job_id=lost.id) == "once\n"
    assert len(jobs_tagged(lost.tag)) == 1, "never submitted twice"


def test_one_status_call_per_resource_per_cycle_for_1000_jobs(
    engine: Engine, tmp_path: Path
) -> None:
    """1,000 real held jobs in Slurm, all tracked: one squeue per cycle, nothing else."""
    loaded = engine.registry.get("cluster")
    backend = engine.backends.get(loaded, "root")
    name = f"iri-held-{tmp_path.name}"  # cleaned up by name, even if submitting broke off
    try:
        held = subprocess.run(
            [
                "bash",
                "-c",
                "for i in $(seq 1000); do sbatch --parsable --hold -p all "
                f"-J {name} -o /dev/null --wrap true; done",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        ).stdout.split()
        assert len(held) == 1000
        for native_id in held:
            record = engine.store.create(
                owner="root",
                resource_id="cluster",
                spec={},
                effective_spec={},
                plan=stored_plan(),
                script="",
            )
            engine.store.set_native_id(record.id, native_id, "submitted")
        counting = ScriptedTransport(otherwise=backend.transport)  # no rules: records, runs
        object.__setattr__(backend.batch, "transport", counting)
        changed = engine.refresh("cluster")
        assert counting.programs() == ["squeue"]
        assert changed == 1000
        held_records = engine.store.find(states=[JobState.HELD])
        assert len(held_records) == 1000, "JobHeldUser maps to held"
        counting.calls.clear()
        engine.refresh("cluster")
        assert counting.programs() == ["squeue"]
    finally:
        subprocess.run(["scancel", "--name", name], capture_output=True, timeout=120)


def test_an_allowed_flag_without_a_value_reaches_sbatch_as_a_bare_option(
    cluster_profile: Path, tmp_path: Path
) -> None:
    """`custom_attributes: {"hold": ""}` (an option that takes no value) is `#SBATCH --hold`:
    the real sbatch holds the job (it refuses `--hold=""`)."""
    from tests.integration.gateway_process import profile_allowing

    engine = make_engine(profile_allowing(cluster_profile, ["hold"], tmp_path), tmp_path)
    try:
        record = submit(
            engine,
            "cluster",
            {"executable": "/bin/true", "attributes": {"custom_attributes": {"hold": ""}}},
        )
        assert "#SBATCH --hold\n" in record.script
        assert record.state == JobState.QUEUED and record.native_id, record.message
        reason = subprocess.run(
            ["squeue", "-h", "-j", record.native_id, "-o", "%r"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert reason.stdout.strip() == "JobHeldUser", reason
        engine.cancel(owner="root", job_id=record.id)
        assert wait_for(engine, record.id, lambda r: r.state.final).state == JobState.CANCELED
    finally:
        engine.close()
