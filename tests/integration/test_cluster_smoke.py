"""The test cluster behaves as the gateway needs: real Slurm, sshd and Podman, no stand-ins.

Plain subprocess and paramiko calls only (no gateway code), so a failure here is the
cluster's, not the gateway's. Every command has a timeout; every wait a bounded deadline.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import paramiko
import pytest

from tests.integration.conftest import ClusterInfo

pytestmark = pytest.mark.integration

COMMAND_TIMEOUT = 30  # seconds, for any one command
JOB_DEADLINE = 60  # seconds for a job to end (others may share the cluster)
POLL = 0.2
FAKE_NODES = {"n1", "n2", "n3", "n4"}

# One line of `sacct -c ... -P -n`: JobID|State|ExitCode, e.g. `12|COMPLETED|0:0`.
Query = Callable[[list[str]], str]


def run(
    argv: list[str], *, input: str | None = None, timeout: float = COMMAND_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, input=input, capture_output=True, text=True, timeout=timeout, check=False
    )


def checked(argv: list[str]) -> str:
    """stdout of a command that must succeed; its stderr in the failure message."""
    result = run(argv)
    assert result.returncode == 0, f"{argv} exit {result.returncode}: {result.stderr}"
    return result.stdout


def sbatch(*options: str) -> str:
    """Submit locally (as root) with `sbatch --parsable`; the job id."""
    job_id = checked(["sbatch", "--parsable", *options]).strip()
    assert re.fullmatch(r"\d+", job_id), job_id
    return job_id


def local_query(argv: list[str]) -> str:
    return checked(argv)


def wait_until_ended(job_id: str, query: Query = local_query) -> tuple[str, str]:
    """Poll the job history (`sacct -c`, jobcomp/filetxt) until the job has ended."""
    argv = ["sacct", "-c", "-j", job_id, "--format=JobID,State,ExitCode", "-P", "-n"]
    deadline = time.monotonic() + JOB_DEADLINE
    while True:
        for line in query(argv).splitlines():
            fields = line.split("|")
            if fields[0] == job_id:
                # sacct may say "CANCELLED by 0"; the state is the first word.
                return fields[1].split()[0], fields[2]
        assert time.monotonic() < deadline, f"job {job_id} did not end in {JOB_DEADLINE} s"
        time.sleep(POLL)


def wait_until_running(job_id: str) -> None:
    deadline = time.monotonic() + JOB_DEADLINE
    while checked(["squeue", "-h", "-j", job_id, "-o", "%T"]).strip() != "RUNNING":
        assert time.monotonic() < deadline, f"job {job_id} did not start in {JOB_DEADLINE} s"
        time.sleep(POLL)


# ---------------------------------------------------------------------------- Slurm, as root


def test_batch_job_completes(cluster: ClusterInfo, tmp_path: Path) -> None:
    job_id = sbatch(
        f"--chdir={tmp_path}", "-o", "out-%j.txt", "--wrap", "echo hello from $SLURMD_NODENAME"
    )
    assert wait_until_ended(job_id) == ("COMPLETED", "0:0")
    output = (tmp_path / f"out-{job_id}.txt").read_text()
    assert re.fullmatch(r"hello from n[1-4]\n", output), output


def test_two_node_job_runs_on_two_distinct_fake_nodes(cluster: ClusterInfo, tmp_path: Path) -> None:
    # `srun hostname` prints the one real host name twice; SLURMD_NODENAME names the fake node.
    job_id = sbatch(
        f"--chdir={tmp_path}",
        "-o",
        "out-%j.txt",
        "-N2",
        "--ntasks-per-node=1",
        "--wrap",
        'srun sh -c "echo node=\\$SLURMD_NODENAME"',
    )
    assert wait_until_ended(job_id) == ("COMPLETED", "0:0")
    lines = (tmp_path / f"out-{job_id}.txt").read_text().split()
    nodes = {line.removeprefix("node=") for line in lines}
    assert len(lines) == 2 and len(nodes) == 2 and nodes <= FAKE_NODES, lines


def test_gpu_job_sees_cuda_visible_devices(cluster: ClusterInfo, tmp_path: Path) -> None:
    job_id = sbatch(
        f"--chdir={tmp_path}",
        "-o",
        "out-%j.txt",
        "-p",
        "gpu",
        "--gres=gpu:1",
        "--wrap",
        'echo "$SLURMD_NODENAME CVD=$CUDA_VISIBLE_DEVICES"',
    )
    assert wait_until_ended(job_id) == ("COMPLETED", "0:0")
    output = (tmp_path / f"out-{job_id}.txt").read_text()
    assert re.fullmatch(r"n[12] CVD=[01]\n", output), output


def test_more_gpus_than_a_node_has_are_refused_at_submit(cluster: ClusterInfo) -> None:
    result = run(["sbatch", "--parsable", "-p", "gpu", "--gres=gpu:3", "--wrap", "true"])
    assert result.returncode != 0, result.stdout
    assert "Requested node configuration is not available" in result.stderr


def test_failing_job_is_failed_with_its_exit_code(cluster: ClusterInfo, tmp_path: Path) -> None:
    job_id = sbatch(f"--chdir={tmp_path}", "-o", "/dev/null", "--wrap", "exit 3")
    assert wait_until_ended(job_id) == ("FAILED", "3:0")


def test_cancelled_job_is_cancelled(cluster: ClusterInfo, tmp_path: Path) -> None:
    # `exec`: the batch step is one process, so SIGTERM ends it and Slurm records 0:15. With
    # a shell waiting on `sleep`, a cancel right at the start can kill `sleep` first and the
    # shell then exits 143 (128 + 15) itself: ExitCode=143:0, seen once on a loaded machine.
    job_id = sbatch(f"--chdir={tmp_path}", "-o", "/dev/null", "--wrap", "exec sleep 300")
    wait_until_running(job_id)
    checked(["scancel", job_id])
    # The history (jobcomp/filetxt) records no signal; the controller, until MinJobAge, does.
    assert wait_until_ended(job_id) == ("CANCELLED", "0:0")
    deadline = time.monotonic() + JOB_DEADLINE
    while "JobState=COMPLETING " in (job := checked(["scontrol", "show", "job", "-o", job_id])):
        assert time.monotonic() < deadline, job
        time.sleep(POLL)
    # SIGTERM (0:15), or SIGKILL (0:9) when the step was not yet the `exec`ed sleep and slurmd
    # escalated after KillWait: seen once in a CI run on a loaded machine (RunTime 0 s).
    assert "JobState=CANCELLED " in job, job
    assert " ExitCode=0:15 " in job or " ExitCode=0:9 " in job, job


# ---------------------------------------------------------------------------- Podman, as root


def test_podman_runs_inside_a_slurm_job(cluster: ClusterInfo, tmp_path: Path) -> None:
    job_id = sbatch(
        f"--chdir={tmp_path}",
        "-o",
        "out-%j.txt",
        "--wrap",
        f"podman run --rm --network none {cluster.test_image} echo hi",
    )
    assert wait_until_ended(job_id) == ("COMPLETED", "0:0")
    assert (tmp_path / f"out-{job_id}.txt").read_text() == "hi\n"


def test_cdi_fake_gpus_reach_the_container(cluster: ClusterInfo) -> None:
    expected = {
        "0": ("0", ["/dev/nvidia0"]),
        "1": ("1", ["/dev/nvidia1"]),
        "all": ("0,1", ["/dev/nvidia0", "/dev/nvidia1"]),
    }
    assert sorted(device.split("=")[1] for device in cluster.cdi_devices) == sorted(expected)
    show = 'echo "gpu=$IRI_FAKE_GPU"; for d in /dev/nvidia*; do [ -c "$d" ] && echo "$d"; done'
    for device in cluster.cdi_devices:
        env_value, nodes = expected[device.split("=")[1]]
        output = checked(
            [
                "podman",
                "run",
                "--rm",
                "--network",
                "none",
                "--device",
                device,
                cluster.test_image,
                "sh",
                "-c",
                show,
            ]
        )
        assert output.split() == [f"gpu={env_value}", *nodes], (device, output)


# ---------------------------------------------------------------------------- SSH login node


def ssh_client(cluster: ClusterInfo, known_hosts: Path) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        cluster.ssh_host,
        port=cluster.ssh_port,
        username=cluster.ssh_user,
        key_filename=str(cluster.ssh_key),
        look_for_keys=False,
        allow_agent=False,
        timeout=10,
        banner_timeout=10,
        auth_timeout=10,
    )
    return client


def ssh_run(
    client: paramiko.SSHClient, command: str, stdin: str | None = None
) -> tuple[int, str, str]:
    """Run a command on the login node: exit status, stdout, stderr."""
    channel_in, channel_out, channel_err = client.exec_command(command, timeout=COMMAND_TIMEOUT)
    if stdin is not None:
        channel_in.write(stdin)
    channel_in.channel.shutdown_write()
    out = channel_out.read().decode()
    err = channel_err.read().decode()
    return channel_out.channel.recv_exit_status(), out, err


@pytest.fixture(scope="module")
def login(cluster: ClusterInfo) -> Iterator[paramiko.SSHClient]:
    client = ssh_client(cluster, cluster.ssh_known_hosts)
    yield client
    client.close()


def ssh_query(client: paramiko.SSHClient) -> Query:
    def query(argv: list[str]) -> str:
        status, out, err = ssh_run(client, " ".join(argv))
        assert status == 0, f"{argv} over SSH: exit {status}: {err}"
        return out

    return query


def ssh_sbatch(client: paramiko.SSHClient, script: str) -> str:
    status, out, err = ssh_run(client, "sbatch --parsable", stdin=script)
    assert status == 0, err
    job_id = out.strip()
    assert re.fullmatch(r"\d+", job_id), out
    return job_id


def test_sbatch_over_ssh_as_alice(cluster: ClusterInfo, login: paramiko.SSHClient) -> None:
    script = '#!/bin/sh\n#SBATCH -o iri-smoke-%j.out\necho "$(id -un) on $SLURMD_NODENAME"\n'
    job_id = ssh_sbatch(login, script)
    assert wait_until_ended(job_id, ssh_query(login)) == ("COMPLETED", "0:0")
    status, out, err = ssh_run(login, f"cat iri-smoke-{job_id}.out && rm iri-smoke-{job_id}.out")
    assert status == 0, err
    assert re.fullmatch(rf"{cluster.ssh_user} on n[1-4]\n", out), out


def test_wrong_host_key_is_refused(cluster: ClusterInfo, tmp_path: Path) -> None:
    other_key = tmp_path / "other_host_key"
    checked(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)])
    key_type, key_data = other_key.with_suffix(".pub").read_text().split()[:2]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[{cluster.ssh_host}]:{cluster.ssh_port} {key_type} {key_data}\n")
    with pytest.raises(paramiko.BadHostKeyException):
        ssh_client(cluster, known_hosts).close()


def test_rootless_podman_in_a_job_submitted_by_alice(
    cluster: ClusterInfo, login: paramiko.SSHClient
) -> None:
    script = (
        "#!/bin/sh\n#SBATCH -o iri-smoke-%j.out\nid -un\n"
        f"podman run --rm --network none {cluster.image_cuda} cat /etc/iri-flavour\n"
        f"podman run --rm --network none {cluster.image_cpu} cat /etc/iri-flavour\n"
    )
    job_id = ssh_sbatch(login, script)
    assert wait_until_ended(job_id, ssh_query(login)) == ("COMPLETED", "0:0")
    status, out, err = ssh_run(login, f"cat iri-smoke-{job_id}.out && rm iri-smoke-{job_id}.out")
    assert status == 0, err
    assert out.split() == [cluster.ssh_user, "cuda", "cpu"], out
