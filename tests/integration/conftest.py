"""The real test cluster: `scripts/cluster start` once per session, then its settings.

The cluster (munged + Slurm with fake nodes n1..n4, an sshd login node on 127.0.0.1:2222 with
user alice, Podman with local images and a CDI spec of fake GPUs) is left running when the
session ends, so the next run reuses it; `scripts/cluster stop` is for people. A cluster that
cannot start fails every test that needs it, with the script's output: it is never skipped.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.jobs.poller import Poller
from iri_gateway.service.operations.backends import Backends
from iri_gateway.service.operations.store import JobRecord, JobStore

CLUSTER_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "cluster"
PBS_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pbs"
# A cold start on a fresh machine installs Debian packages first (~30 s); later ones take ~2 s.
START_TIMEOUT = 900


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "integration: needs the real test cluster that scripts/cluster starts "
        "(Slurm, sshd, Podman; root on Debian 12)",
    )


@dataclass(frozen=True)
class ClusterInfo:
    """Where the running test cluster is, as `scripts/cluster env` tells it."""

    dir: Path
    slurm_conf: Path
    ssh_host: str
    ssh_port: int
    ssh_user: str
    ssh_other_user: str
    """A second login account (the account mapping tests run jobs as both)."""
    ssh_ca_port: int
    """The login sshd that trusts the user certificate authority only (no keys)."""
    ssh_user_ca: Path
    """That certificate authority's private key."""
    ssh_key: Path
    ssh_known_hosts: Path
    cdi_devices: tuple[str, ...]
    test_image: str
    image_cuda: str
    image_cpu: str
    # Charliecloud images of the cuda and cpu test images (directories), and the cpu one as
    # a SquashFS file (scripts/cluster, issue 17).
    ch_image_cuda: Path
    ch_image_cpu: Path
    ch_image_sqfs: Path

    @classmethod
    def from_env_lines(cls, text: str) -> ClusterInfo:
        """Parse the `export NAME=VALUE` lines that `scripts/cluster env` prints."""
        values: dict[str, str] = {}
        for line in text.splitlines():
            words = shlex.split(line)
            if not words:
                continue
            if words[0] != "export" or len(words) != 2 or "=" not in words[1]:
                raise ValueError(f"unexpected line from scripts/cluster env: {line!r}")
            name, value = words[1].split("=", 1)
            values[name] = value
        return cls(
            dir=Path(values["IRI_CLUSTER_DIR"]),
            slurm_conf=Path(values["SLURM_CONF"]),
            ssh_host=values["IRI_SSH_HOST"],
            ssh_port=int(values["IRI_SSH_PORT"]),
            ssh_user=values["IRI_SSH_USER"],
            ssh_other_user=values["IRI_SSH_OTHER_USER"],
            ssh_ca_port=int(values["IRI_SSH_CA_PORT"]),
            ssh_user_ca=Path(values["IRI_SSH_USER_CA"]),
            ssh_key=Path(values["IRI_SSH_KEY"]),
            ssh_known_hosts=Path(values["IRI_SSH_KNOWN_HOSTS"]),
            cdi_devices=tuple(values["IRI_CDI_DEVICES"].split(",")),
            test_image=values["IRI_TEST_IMAGE"],
            image_cuda=values["IRI_TEST_IMAGE_CUDA"],
            image_cpu=values["IRI_TEST_IMAGE_CPU"],
            ch_image_cuda=Path(values["IRI_CH_IMAGE_CUDA"]),
            ch_image_cpu=Path(values["IRI_CH_IMAGE_CPU"]),
            ch_image_sqfs=Path(values["IRI_CH_IMAGE_SQFS"]),
        )


def _run_script(
    command: str, timeout: float, script: Path = CLUSTER_SCRIPT
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [str(script), command],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        pytest.fail(
            f"scripts/{script.name} {command} did not finish within {timeout} s\n"
            f"--- stdout\n{expired.stdout!s}\n--- stderr\n{expired.stderr!s}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def cluster() -> Iterator[ClusterInfo]:
    """The running test cluster; `SLURM_CONF` points at it for the whole session."""
    started = _run_script("start", START_TIMEOUT)
    if started.returncode != 0:
        pytest.fail(
            f"scripts/cluster start failed (exit {started.returncode}): the integration tests "
            f"need the real test cluster.\n--- stdout\n{started.stdout}\n"
            f"--- stderr\n{started.stderr}",
            pytrace=False,
        )
    env = _run_script("env", 30)
    if env.returncode != 0:
        pytest.fail(f"scripts/cluster env failed:\n{env.stderr}", pytrace=False)
    info = ClusterInfo.from_env_lines(env.stdout)
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(info.slurm_conf)
    try:
        yield info
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous


PROFILE_TEMPLATE = Path(__file__).parent / "cluster-profile.yaml.in"


def running_cluster() -> ClusterInfo:
    """The test cluster as `scripts/cluster env` describes it (for tests outside this folder,
    which run after `scripts/test-all` has started it)."""
    env = _run_script("env", 30)
    if env.returncode != 0:
        pytest.fail(f"scripts/cluster env failed:\n{env.stderr}", pytrace=False)
    return ClusterInfo.from_env_lines(env.stdout)


def filled(text: str, cluster: ClusterInfo) -> str:
    """A profile's `text` with the running cluster's SSH login node settings filled in."""
    for placeholder, value in {
        "@@SSH_PORT@@": str(cluster.ssh_port),
        "@@KNOWN_HOSTS@@": str(cluster.ssh_known_hosts),
        "@@SSH_KEY@@": str(cluster.ssh_key),
        "@@SSH_USER@@": cluster.ssh_user,
        "@@SSH_OTHER_USER@@": cluster.ssh_other_user,
        "@@SSH_CA_PORT@@": str(cluster.ssh_ca_port),
        "@@SSH_USER_CA@@": str(cluster.ssh_user_ca),
    }.items():
        text = text.replace(placeholder, value)
    return text


def write_profile(template: Path, cluster: ClusterInfo, path: Path) -> Path:
    """`template` with the running cluster's SSH login node settings filled in, at `path`."""
    path.write_text(filled(template.read_text(), cluster))
    return path


def write_cluster_profile(cluster: ClusterInfo, folder: Path) -> Path:
    """The test cluster's profile with the running cluster's SSH settings filled in."""
    return write_profile(PROFILE_TEMPLATE, cluster, folder / "cluster.yaml")


@pytest.fixture(scope="module")
def cluster_profile(cluster: ClusterInfo, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test cluster's profile with the running cluster's SSH settings filled in."""
    return write_cluster_profile(cluster, tmp_path_factory.mktemp("cluster-profile"))


def make_engine(profile: Path, data: Path) -> Engine:
    """An engine on `profile` with its SQLite store and job folders under `data`."""
    return Engine(
        registry=ProfileRegistry.from_files([profile]),
        store=JobStore(f"sqlite:///{data}/jobs.db"),
        backends=Backends(data),
    )


@pytest.fixture
def cluster_engine(cluster_profile: Path, tmp_path: Path) -> Iterator[Engine]:
    """An engine on the test cluster's profile; jobs it leaves unsettled are cancelled."""
    engine = make_engine(cluster_profile, tmp_path)
    yield engine
    for record in engine.store.unsettled():
        if record.native_id:
            subprocess.run(["scancel", record.native_id], capture_output=True, timeout=30)
    engine.backends.close()


def wait_all_final(
    engine: Engine, job_ids: list[str], timeout: float = 120
) -> dict[str, JobRecord]:
    """Run the real poller (one batched status query per resource and cycle) until every job
    has ended; fails the test after `timeout` seconds."""
    poller = Poller(engine)
    deadline = time.monotonic() + timeout
    while True:
        poller.cycle(force=True)
        records = {job_id: engine.store.get(job_id) for job_id in job_ids}
        done = {job_id: r for job_id, r in records.items() if r is not None and r.state.final}
        if len(done) == len(job_ids):
            return done
        assert time.monotonic() < deadline, f"not ended in {timeout} s: {records}"
        time.sleep(0.3)


# --- the real OpenPBS (issue 26) ----------------------------------------------------------

# A first start on a machine without the build compiles OpenPBS (about 2-4 minutes); later
# ones take a few seconds.
PBS_START_TIMEOUT = 1200
PBS_PROFILE_TEMPLATE = Path(__file__).parent / "pbs-profile.yaml.in"


@dataclass(frozen=True)
class PbsInfo:
    """Where the running OpenPBS is, as `scripts/pbs env` tells it, and the login node it
    shares with the test cluster."""

    host: str
    exec_dir: Path
    cluster: ClusterInfo

    @property
    def commands(self) -> Path:
        return self.exec_dir / "bin"


def start_pbs() -> None:
    """`scripts/pbs start`, failing the test with the script's words (among them how to get
    the OpenPBS source when it is missing): PBS tests never pass without a real PBS."""
    started = _run_script("start", PBS_START_TIMEOUT, PBS_SCRIPT)
    if started.returncode != 0:
        pytest.fail(
            f"scripts/pbs start failed (exit {started.returncode}): the PBS tests need the "
            f"real OpenPBS.\n--- stdout\n{started.stdout}\n--- stderr\n{started.stderr}",
            pytrace=False,
        )


def running_pbs(cluster: ClusterInfo) -> PbsInfo:
    """The OpenPBS that `scripts/pbs start` runs, started if it is not."""
    start_pbs()
    env = _run_script("env", 30, PBS_SCRIPT)
    if env.returncode != 0:
        pytest.fail(f"scripts/pbs env failed:\n{env.stderr}", pytrace=False)
    values = dict(
        shlex.split(line)[1].split("=", 1) for line in env.stdout.splitlines() if line.strip()
    )
    return PbsInfo(values["IRI_PBS_HOST"], Path(values["IRI_PBS_EXEC"]), cluster)


@pytest.fixture(scope="session")
def pbs(cluster: ClusterInfo) -> PbsInfo:
    """The real OpenPBS server, scheduler and MOM (scripts/pbs), beside the test cluster."""
    return running_pbs(cluster)


def write_pbs_profile(info: PbsInfo, folder: Path) -> Path:
    """The PBS test profile with the login node's SSH settings filled in."""
    return write_profile(PBS_PROFILE_TEMPLATE, info.cluster, folder / "pbs.yaml")


@pytest.fixture(scope="module")
def pbs_profile(pbs: PbsInfo, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The PBS test profile (resources `pbs`, local as root, and `pbs-ssh`, as alice)."""
    return write_pbs_profile(pbs, tmp_path_factory.mktemp("pbs-profile"))


@pytest.fixture
def pbs_engine(pbs_profile: Path, tmp_path: Path) -> Iterator[Engine]:
    """An engine on the PBS test profile; jobs it leaves unsettled are deleted."""
    engine = make_engine(pbs_profile, tmp_path)
    yield engine
    for record in engine.store.unsettled():
        if record.native_id:
            subprocess.run(
                ["qdel", "-W", "force", record.native_id], capture_output=True, timeout=30
            )
    engine.backends.close()
