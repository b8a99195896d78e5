"""The `charliecloud` runtime on the real test cluster: Charliecloud 0.31's ch-run in Slurm jobs.

scripts/cluster converts the project's test images into a directory image (`cuda`, `cpu`) and
a SquashFS file (`cpu.sqfs`). Each image holds `/etc/iri-flavour` naming its flavour, which the
host does not have, so a job's output naming it proves the program ran inside the image.
Jobs of `cluster` run as root in folders under /tmp (ch-run shares /tmp with the host); jobs
of `cluster-ssh` run as alice through the SSH login node in her home (shown by `--home`).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.errors import JobRejectedError
from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.service.jobs.engine import Engine, OutputUnavailableError
from iri_gateway.service.operations.store import JobRecord
from tests.integration.conftest import ClusterInfo, make_engine, wait_all_final
from tests.support.serve import free_port

pytestmark = pytest.mark.integration


def job(image: str, script: str, **fields: Any) -> dict[str, Any]:
    container = {"runtime": "charliecloud", "image": image, **fields.pop("container", {})}
    return {
        "name": "ch-test",
        "executable": "/bin/sh",
        "arguments": ["-c", script],
        "container": container,
        "attributes": {"duration": 300},
        **fields,
    }


def sandbox(path: Path) -> str:
    """A directory image in the gateway's form for folders: a trailing '/'."""
    return f"{path}/"


def run(
    engine: Engine, doc: dict[str, Any], owner: str = "root", resource: str = "cluster"
) -> tuple[JobRecord, str, str]:
    record = engine.submit(owner=owner, resource_id=resource, spec=parse_jobspec(doc)).record
    assert record.native_id, record
    record = wait_all_final(engine, [record.id])[record.id]
    out = engine.read_output(owner=owner, job_id=record.id)
    err = engine.read_output(owner=owner, job_id=record.id, stream="stderr")
    return record, out, err


def test_the_host_lacks_the_images_flavour_file() -> None:
    assert not Path("/etc/iri-flavour").exists(), "the proof below needs a file only images have"


def test_bare_job_runs_in_the_directory_image_in_the_job_directory(
    cluster_engine: Engine, cluster: ClusterInfo
) -> None:
    record, out, err = run(
        cluster_engine, job(sandbox(cluster.ch_image_cuda), "cat /etc/iri-flavour; pwd; id -u")
    )
    assert record.state == JobState.COMPLETED and record.exit_code == 0, (record, err)
    assert "ch-run" in record.script and "--env-no-expand" in record.script
    flavour, workdir, uid = out.split("\n")[:3]
    assert flavour == "cuda"
    # `-c` always: the container starts in the job's directory, not ch-run's default '/'.
    assert workdir == record.effective_spec["directory"]
    assert uid == "0"


def test_squashfs_image_runs(cluster_engine: Engine, cluster: ClusterInfo) -> None:
    record, out, err = run(cluster_engine, job(str(cluster.ch_image_sqfs), "cat /etc/iri-flavour"))
    assert record.state == JobState.COMPLETED and record.exit_code == 0, (record, err)
    assert out == "cpu\n"


def test_read_write_mount_and_working_directory(
    cluster_engine: Engine, cluster: ClusterInfo, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.txt").write_text("hello from the host\n")
    record, out, err = run(
        cluster_engine,
        job(
            sandbox(cluster.ch_image_cpu),
            'cat /etc/iri-flavour; pwd; cat in.txt; echo "written inside" > out.txt',
            container={
                "volume_mounts": [{"source": str(data), "target": "/mnt/0", "read_only": False}],
                "workdir": "/mnt/0",
            },
        ),
    )
    assert record.state == JobState.COMPLETED and record.exit_code == 0, (record, err)
    assert out == "cpu\n/mnt/0\nhello from the host\n"
    assert (data / "out.txt").read_text() == "written inside\n"


def test_read_only_mount_is_refused_with_the_reason(
    cluster_engine: Engine, cluster: ClusterInfo, tmp_path: Path
) -> None:
    doc = job(
        sandbox(cluster.ch_image_cpu),
        "true",
        container={
            "volume_mounts": [{"source": str(tmp_path), "target": "/mnt/0", "read_only": True}]
        },
    )
    with pytest.raises(JobRejectedError) as refused:
        cluster_engine.submit(owner="root", resource_id="cluster", spec=parse_jobspec(doc))
    [problem] = refused.value.problems
    assert problem.field == "container.volume_mounts[0].read_only"
    assert "no read-only form" in problem.reason
    assert problem.offered == "read_only: false"
    assert cluster_engine.store.find() == [], "nothing was submitted"


def test_environment_reaches_the_program_as_text(
    cluster_engine: Engine, cluster: ClusterInfo
) -> None:
    values = {
        "Q": "a b $HOME \"x\" 'y' `id` $(id) ;|&",
        "N": "line1\nline2",
        "E": "a=b:$X",
        "EMPTY": "",
    }
    script = (
        'printf "Q=[%s]\\nN=[%s]\\nE=[%s]\\nEMPTY=[%s]\\n" "$Q" "$N" "$E" "${EMPTY-unset}"; '
        'echo "job=${SLURM_JOB_ID-unset}"'
    )
    record, out, err = run(
        cluster_engine, job(str(cluster.ch_image_sqfs), script, environment=values)
    )
    assert record.state == JobState.COMPLETED, (record, err)
    expected = "".join(f"{name}=[{value}]\n" for name, value in values.items())
    assert out == expected + f"job={record.native_id}\n", "the host environment passes"

    record, out, err = run(
        cluster_engine,
        job(str(cluster.ch_image_sqfs), script, environment=values, inherit_environment=False),
    )
    assert record.state == JobState.COMPLETED, (record, err)
    assert "--unset-env=*" in record.script
    assert out == expected + "job=unset\n", "without the host environment"


def test_failing_program_fails_the_job_with_its_exit_code(
    cluster_engine: Engine, cluster: ClusterInfo
) -> None:
    record, out, _ = run(
        cluster_engine, job(sandbox(cluster.ch_image_cuda), "cat /etc/iri-flavour; exit 7")
    )
    assert record.state == JobState.FAILED and record.exit_code == 7, record
    assert out == "cuda\n"


def _processes(marker: str) -> list[str]:
    listed = subprocess.run(
        ["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    return [line for line in listed.splitlines() if marker in line and "ps -eo" not in line]


def _output_so_far(engine: Engine, job_id: str) -> str:
    try:
        return engine.read_output(owner="root", job_id=job_id)
    except OutputUnavailableError:  # not written yet
        return ""


@pytest.mark.parametrize("image", ["sqfs", "dir"])
def test_cancel_leaves_no_process_behind(
    cluster_engine: Engine, cluster: ClusterInfo, image: str
) -> None:
    engine = cluster_engine
    path = str(cluster.ch_image_sqfs) if image == "sqfs" else sandbox(cluster.ch_image_cpu)
    seconds = "4711" if image == "sqfs" else "4712"
    marker = f"sleep {seconds}"
    doc = job(path, f"cat /etc/iri-flavour; {marker}")
    record = engine.submit(owner="root", resource_id="cluster", spec=parse_jobspec(doc)).record
    deadline = time.monotonic() + 60
    # Started inside the image: it printed the image's flavour, and its sleep is running.
    while not (_output_so_far(engine, record.id) == "cpu\n" and _processes(marker)):
        assert time.monotonic() < deadline, "the program did not start"
        time.sleep(0.2)
    engine.cancel(owner="root", job_id=record.id)
    record = wait_all_final(engine, [record.id], timeout=90)[record.id]
    assert record.state == JobState.CANCELED, record
    deadline = time.monotonic() + 60
    while left := _processes(marker) + _processes(path):  # the program, or ch-run on the image
        assert time.monotonic() < deadline, f"left behind after the cancel: {left}"
        time.sleep(0.3)


def test_two_node_job_runs_the_image_on_both_nodes(
    cluster_engine: Engine, cluster: ClusterInfo
) -> None:
    record, out, err = run(
        cluster_engine,
        job(
            str(cluster.ch_image_sqfs),
            'echo "$SLURMD_NODENAME $(cat /etc/iri-flavour)"',
            resources={"node_count": 2, "processes_per_node": 1},
        ),
    )
    assert record.state == JobState.COMPLETED and record.exit_code == 0, (record, err)
    lines = sorted(out.splitlines())
    assert len(lines) == 2, out
    nodes = {line.split()[0] for line in lines}
    assert len(nodes) == 2, f"two distinct nodes: {out}"
    assert all(line.split()[1] == "cpu" for line in lines)


def test_job_over_the_ssh_login_node_as_alice(cluster_engine: Engine, cluster: ClusterInfo) -> None:
    record, out, err = run(
        cluster_engine,
        job(str(cluster.ch_image_sqfs), "cat /etc/iri-flavour; pwd; id -un"),
        owner="alice",
        resource="cluster-ssh",
    )
    assert record.state == JobState.COMPLETED and record.exit_code == 0, (record, err)
    flavour, workdir, user = out.split("\n")[:3]
    assert flavour == "cpu"
    assert workdir == record.effective_spec["directory"], "the job folder, in her home"
    assert workdir.startswith("/home/")
    assert user == cluster.ssh_user


# --- staging a registry image: a real registry on 127.0.0.1, ch-image pull, ch-fromhost ------

STAGING_PROFILE = """
facility: {{id: chstaging, name: Charliecloud staging, description: A registry image pulled.}}
resources:
  - id: ch-staging
    name: The test cluster's nodes, registry images staged by ch-image
    files: {{roots: [/tmp]}}
    scheduler: {{kind: slurm, history: jobcomp, history_window: 300}}
    queues: [{{name: all, default: true, max_nodes: 4, max_walltime: 3600}}]
    nodes: {{count: 4, cpu: {{arch: x86_64, cores: 2, mhz: 2000}}, memory_gib: 1.9}}
    mpi: {{flavour: mpich, launcher: srun}}
    runtimes:
      default: charliecloud
      charliecloud:
        # ch-image is Python with Debian's lark: Debian's python3 first (root's PATH has pyenv).
        env: {{CH_IMAGE_STORAGE: "{storage}", REQUESTS_CA_BUNDLE: "{cert}",
               PATH: "/usr/bin:/bin:$PATH"}}
        # The "MPI library" injected at staging time: a host library (ch-fromhost puts it
        # where the image's ldconfig says and runs ldconfig in the image).
        mpi: {{flags: ["-p", "{library}"]}}
        image_forms: [oci]
        staging: {{when: job, command: [ch-image, --no-cache, pull]}}
"""


@pytest.fixture(scope="module")
def registry(
    cluster: ClusterInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """Debian's docker-registry serving TLS on 127.0.0.1 (a certificate made here), holding
    the cpu test image pushed from Podman: (its address, the certificate)."""
    folder = tmp_path_factory.mktemp("registry")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    address = f"127.0.0.1:{free_port()}"
    (folder / "config.yml").write_text(
        f"version: 0.1\nlog: {{level: warn}}\nstorage: {{filesystem: {{rootdirectory: "
        f"{folder / 'data'}}}}}\nhttp:\n  addr: {address}\n"
        f"  tls: {{certificate: {cert}, key: {key}}}\n"
    )
    log = (folder / "registry.log").open("w")
    server = subprocess.Popen(
        ["docker-registry", "serve", str(folder / "config.yml")],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", int(address.rsplit(":", 1)[1]))) == 0:
                    break
            assert server.poll() is None, (folder / "registry.log").read_text()
            assert time.monotonic() < deadline, "the registry did not listen"
            time.sleep(0.1)
        # ch-fromhost needs /sbin/ldconfig and a library folder in the image to inject a
        # library: the cpu image plus Debian's static ldconfig.
        context = folder / "context"
        (context / "usr" / "lib" / "x86_64-linux-gnu").mkdir(parents=True)
        (context / "usr" / "lib" / "x86_64-linux-gnu" / ".keep").touch()
        shutil.copy("/sbin/ldconfig", context / "ldconfig")
        (context / "Containerfile").write_text(
            f"FROM {cluster.image_cpu}\nCOPY ldconfig /sbin/ldconfig\nCOPY usr /usr\n"
        )
        image = f"{address}/iri-test/app:cpu-ldconfig"
        for command in (
            ["podman", "build", "-q", "-t", image, str(context)],
            ["podman", "push", "--tls-verify=false", image],
        ):
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, (command, done.stderr)
        yield image, cert
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_registry_image_is_pulled_injected_once_and_run_by_name_on_two_nodes(
    registry: tuple[str, Path], tmp_path: Path
) -> None:
    image, cert = registry
    library = "/usr/lib/x86_64-linux-gnu/libz.so.1"  # any host library stands for MPI's
    storage = tmp_path / "storage"
    profile = tmp_path / "staging.yaml"
    profile.write_text(STAGING_PROFILE.format(storage=storage, cert=cert, library=library))
    (tmp_path / "data").mkdir()
    engine = make_engine(profile, tmp_path / "data")
    try:
        record, out, err = run(
            engine,
            {
                **job(
                    image,
                    'echo "$SLURMD_NODENAME $(cat /etc/iri-flavour) '
                    '$(/sbin/ldconfig -p | grep -c libz.so.1)"',
                ),
                "launcher": "srun",
                "resources": {"node_count": 2, "processes_per_node": 1},
            },
            resource="ch-staging",
        )
    finally:
        engine.backends.close()
    assert record.state == JobState.COMPLETED and record.exit_code == 0, (record, err)
    script = record.script
    assert f"ch-image --no-cache pull {image} || exit 1" in script
    assert script.count("ch-fromhost") == 1, "injected once, before the launch"
    assert script.index("ch-fromhost") < script.index("srun")
    lines = sorted(out.splitlines())
    assert [line.split(" ", 1)[1] for line in lines] == ["cpu 1"] * 2, (out, err)
    assert len({line.split()[0] for line in lines}) == 2, f"two nodes: {out}"
    # Pulled into the site's storage, under the name ch-run found it by; the library is in.
    name = image.replace(":", "+").replace("/", "%")
    assert (storage / "img" / name / library.lstrip("/")).is_file()
