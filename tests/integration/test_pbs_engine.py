"""The engine against the real OpenPBS 23.06.06 (scripts/pbs): locally as root and through
the SSH login node as alice.

Every test submits through `Engine.submit` (plan, record, qsub) and tracks through the real
poller (one batched `qstat -f -F json` per resource and cycle), as the gateway does in
production. Jobs are submitted together and waited for together: a PBS job starts within a
second or two, and a scheduler cycle is 2 s.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from iri_gateway.errors import JobRejectedError, UpdateError
from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.schedulers.batch import JobChanges
from iri_gateway.schedulers.pbs.qsub import TAG_VARIABLE
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.jobs.poller import Poller
from iri_gateway.service.operations.store import JobRecord
from tests.integration.conftest import PbsInfo, make_engine

pytestmark = pytest.mark.integration

RESOURCES = ("pbs", "pbs-ssh")
OWNER = {"pbs": "root", "pbs-ssh": "alice"}
ROOT = Path(__file__).parent.parent.parent
IMAGE = "localhost/iri-test/busybox:latest"
"""The test cluster's Podman image (`scripts/cluster env`: IRI_TEST_IMAGE), in the local
store of root and of alice."""


@pytest.fixture
def engine(pbs_engine: Engine) -> Engine:
    return pbs_engine


@pytest.fixture
def shared_dir(tmp_path: Path) -> Path:
    """A folder every account (root, alice, containers) can use."""
    folder = Path("/tmp") / f"iri-pbs-{tmp_path.name}-{os.getpid()}"
    folder.mkdir(mode=0o777, exist_ok=True)
    folder.chmod(0o777)
    return folder


def submit(engine: Engine, resource: str, document: dict[str, Any]) -> JobRecord:
    spec = parse_jobspec(document)
    return engine.submit(owner=OWNER[resource], resource_id=resource, spec=spec).record


def wait_until(
    engine: Engine,
    job_ids: list[str],
    done: Callable[[JobRecord], bool],
    timeout: float = 120,
) -> dict[str, JobRecord]:
    """Run the real poller until `done` holds for every job; fails with the states seen."""
    poller = Poller(engine)
    deadline = time.monotonic() + timeout
    seen: dict[str, list[str]] = {job_id: [] for job_id in job_ids}
    while True:
        poller.cycle(force=True)
        records: dict[str, JobRecord] = {}
        for job_id in job_ids:
            record = engine.store.get(job_id)
            assert record is not None
            records[job_id] = record
            if not seen[job_id] or seen[job_id][-1] != record.state.value:
                seen[job_id].append(record.state.value)
        if all(done(record) for record in records.values()):
            return records
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {timeout} s; states seen {seen}: {records}")
        time.sleep(0.3)


def final(engine: Engine, *records: JobRecord, timeout: float = 120) -> list[JobRecord]:
    ids = [record.id for record in records]
    done = wait_until(engine, ids, lambda r: r.state.final, timeout)
    return [done[job_id] for job_id in ids]


def output(engine: Engine, record: JobRecord, stream: str = "stdout") -> str:
    owner = record.owner
    return engine.read_output(owner=owner, job_id=record.id, stream=stream)  # type: ignore[arg-type]


def explain(engine: Engine, record: JobRecord) -> str:
    """What a failed assertion on a job shows: its record, its stdout and stderr."""
    try:
        words = f"\n--- stdout\n{output(engine, record)}\n--- stderr\n"
        return f"{record}{words}{output(engine, record, 'stderr')}"
    except Exception as error:  # the output itself may be what is missing
        return f"{record}\n(no output: {error})"


def qstat_jobs(*native_ids: str) -> dict[str, Any]:
    """`qstat -x -f -F json` of this test's jobs (finished ones included), as root.

    Only ever of named jobs: OpenPBS 23.06.06 prints a string attribute as it is, without
    JSON's escapes (a raw control character or backslash in another job's Account_Name, seen
    in this server's history, makes the document of every job unreadable as JSON)."""
    assert native_ids, "name the jobs (see the docstring)"
    shown = subprocess.run(
        ["qstat", "-x", "-f", "-F", "json", *native_ids],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    jobs: dict[str, Any] = json.loads(shown.stdout)["Jobs"]
    return jobs


# --- lifecycle -----------------------------------------------------------------------------


def test_queued_active_completed_and_a_failure_on_both_resources(engine: Engine) -> None:
    """A job goes queued -> active -> completed on both resources, a failing one is failed
    with its exit code; the jobs run as root locally and as alice through SSH."""
    sleepers = {
        resource: submit(
            engine,
            resource,
            {
                "executable": "/bin/sh",
                "arguments": ["-c", 'sleep 3; echo "done by $(id -un) on $(hostname)"'],
                "attributes": {"duration": 120},
                "resources": {"exclusive_node_use": False},
            },
        )
        for resource in RESOURCES
    }
    failures = {
        resource: submit(
            engine,
            resource,
            {
                "executable": "/bin/sh",
                "arguments": ["-c", "echo failing >&2; exit 3"],
                "resources": {"exclusive_node_use": False},
            },
        )
        for resource in RESOURCES
    }
    for record in [*sleepers.values(), *failures.values()]:
        assert record.state == JobState.QUEUED and record.native_id, record
        assert record.native_id.endswith(".pbshost"), record.native_id
    wait_until(engine, [r.id for r in sleepers.values()], lambda r: r.state == JobState.ACTIVE)
    done = final(engine, *sleepers.values(), *failures.values())
    by_id = {record.id: record for record in done}
    for resource in RESOURCES:
        record = by_id[sleepers[resource].id]
        assert record.state == JobState.COMPLETED and record.exit_code == 0, explain(engine, record)
        states = [h["state"] for h in record.history]
        assert states.index("queued") < states.index("active") < states.index("completed")
        assert output(engine, record).startswith(f"done by {OWNER[resource]} on "), explain(
            engine, record
        )
        failed = by_id[failures[resource].id]
        assert failed.state == JobState.FAILED and failed.exit_code == 3, explain(engine, failed)
        assert output(engine, failed, "stderr") == "failing\n"


def test_two_node_mpi_job_gets_two_vnodes_and_two_ranks(engine: Engine) -> None:
    """MPICH's Hydra mpiexec starts one rank on each of two vnodes that PBS gave the job
    (`$PBS_NODEFILE` lists both; every vnode is this machine, HYDRA_LAUNCHER=fork)."""
    record = submit(
        engine,
        "pbs",
        {
            "executable": "/bin/sh",
            "arguments": ["-c", 'echo "rank $PMI_RANK of $PMI_SIZE"'],
            "resources": {"node_count": 2, "processes_per_node": 1, "exclusive_node_use": False},
            "launcher": "mpiexec",
        },
    )
    assert "#PBS -l select=2:ncpus=1:mpiprocs=1" in record.script
    (record,) = final(engine, record)
    assert record.state == JobState.COMPLETED, explain(engine, record)
    assert sorted(output(engine, record).splitlines()) == ["rank 0 of 2", "rank 1 of 2"]
    assert record.native_id
    exec_vnode = qstat_jobs(record.native_id)[record.native_id]["exec_vnode"]
    vnodes = {chunk.strip("()").split(":")[0] for chunk in exec_vnode.split("+")}
    assert len(vnodes) == 2 and all(v.startswith("pbs-n") for v in vnodes), exec_vnode


# --- containers and GPUs -------------------------------------------------------------------


def test_podman_root_locally_and_rootless_over_ssh_with_a_mount(
    engine: Engine, shared_dir: Path
) -> None:
    """Podman inside PBS jobs: as root on `pbs`, rootless as alice on `pbs-ssh`; a folder of
    /tmp is mounted read-only as /data and writable as /out."""
    (shared_dir / "input.txt").write_text("mounted input\n")
    records = {}
    for resource in RESOURCES:
        folder = shared_dir / resource
        folder.mkdir(mode=0o777)
        folder.chmod(0o777)
        (folder / "input.txt").write_text(f"input for {resource}\n")
        records[resource] = submit(
            engine,
            resource,
            {
                "executable": "/bin/sh",
                "arguments": [
                    "-c",
                    'cat /data/input.txt; echo "$GREETING"; pwd; echo written > /out/result.txt',
                ],
                "environment": {"GREETING": "hello 'container' $(x)"},
                # The job's folder: under /tmp for root; alice's files root is her home.
                **({"directory": str(folder)} if resource == "pbs" else {}),
                "resources": {"exclusive_node_use": False},
                "container": {
                    "image": IMAGE,
                    "network": "none",
                    "workdir": "/data",
                    "volume_mounts": [
                        {"source": str(folder), "target": "/data", "read_only": True},
                        {"source": str(folder), "target": "/out", "read_only": False},
                    ],
                },
            },
        )
    for record in final(engine, *records.values()):
        resource = record.resource_id
        assert record.state == JobState.COMPLETED, explain(engine, record)
        assert output(engine, record) == (
            f"input for {resource}\nhello 'container' $(x)\n/data\n"
        ), explain(engine, record)
        assert (shared_dir / resource / "result.txt").read_text() == "written\n"


def test_charliecloud_directory_and_squashfs_images_with_a_mount(
    engine: Engine, pbs: PbsInfo, shared_dir: Path
) -> None:
    """ch-run inside PBS jobs: the directory image (the gateway's form: a trailing '/') and
    the SquashFS file, each proving it ran inside by the image's /etc/iri-flavour."""
    cluster = pbs.cluster
    (shared_dir / "input.txt").write_text("charlie input\n")
    documents = [
        {
            "executable": "/bin/sh",
            "arguments": ["-c", "cat /etc/iri-flavour; cat /mnt/0/input.txt; pwd"],
            "resources": {"exclusive_node_use": False},
            "container": {
                "runtime": "charliecloud",
                "image": image,
                "workdir": "/mnt/0",
                "volume_mounts": [
                    {"source": str(shared_dir), "target": "/mnt/0", "read_only": False}
                ],
            },
        }
        for image in (f"{cluster.ch_image_cuda}/", str(cluster.ch_image_sqfs))
    ]
    directory, squashfs = final(engine, *(submit(engine, "pbs", doc) for doc in documents))
    assert directory.state == JobState.COMPLETED, explain(engine, directory)
    assert output(engine, directory) == "cuda\ncharlie input\n/mnt/0\n", explain(engine, directory)
    assert squashfs.state == JobState.COMPLETED, explain(engine, squashfs)
    assert output(engine, squashfs) == "cpu\ncharlie input\n/mnt/0\n", explain(engine, squashfs)


def test_gpus_are_requested_as_ngpus_and_reach_podman_as_a_cdi_device(engine: Engine) -> None:
    """One GPU: `ngpus=1` in the select chunk (PBS gives the job a vnode with a free GPU),
    and the container gets the CDI device asked for; the whole node's GPUs by default."""
    one, every = (
        submit(
            engine,
            "pbs",
            {
                "executable": "/bin/sh",
                "arguments": ["-c", 'echo "gpu=$IRI_FAKE_GPU"'],
                "resources": {"gpu_cores_per_process": gpus, "exclusive_node_use": False},
                "container": {"image": IMAGE, **devices},
            },
        )
        for gpus, devices in ((1, {"devices": ["example.com/gpu=1"]}), (2, {}))
    )
    assert ":ngpus=1" in one.script and ":ngpus=2" in every.script
    one, every = final(engine, one, every)
    assert one.state == JobState.COMPLETED, explain(engine, one)
    assert output(engine, one).strip() == "gpu=1"
    assert every.state == JobState.COMPLETED, explain(engine, every)
    assert output(engine, every).strip() == "gpu=0,1"
    assert one.native_id and every.native_id
    shown = qstat_jobs(one.native_id, every.native_id)
    assert shown[one.native_id]["Resource_List"]["ngpus"] == 1
    assert shown[every.native_id]["Resource_List"]["ngpus"] == 2


# --- custom attributes ---------------------------------------------------------------------


def test_custom_attributes_allowed_reach_qsub_and_a_disallowed_one_is_refused(
    engine: Engine,
) -> None:
    """`filesystems` (a site resource the server defines) and `software` (built into PBS)
    reach the job, the user's `filesystems` before the site's default (qsub keeps the first);
    `host` is not allowed by the profile and never reaches PBS."""
    record = submit(
        engine,
        "pbs",
        {
            "executable": "/bin/true",
            "attributes": {"custom_attributes": {"filesystems": "home:grand"}},
            "resources": {"exclusive_node_use": False},
        },
    )
    (record,) = final(engine, record)
    assert record.state == JobState.COMPLETED, explain(engine, record)
    assert record.native_id
    resources = qstat_jobs(record.native_id)[record.native_id]["Resource_List"]
    assert resources["filesystems"] == "home:grand", resources
    # `software` is one of OpenPBS's built-in job resources (a string the server keeps): the
    # real 23.06.06 accepted it without any site definition.
    software = submit(
        engine,
        "pbs",
        {
            "executable": "/bin/true",
            "attributes": {"custom_attributes": {"software": "lammps"}},
            "resources": {"exclusive_node_use": False},
        },
    )
    assert software.native_id, software
    assert qstat_jobs(software.native_id)[software.native_id]["Resource_List"]["software"] == (
        "lammps"
    )

    before = len(engine.store.find())
    with pytest.raises(JobRejectedError) as refused:
        submit(
            engine,
            "pbs",
            {"executable": "/bin/true", "attributes": {"custom_attributes": {"host": "pbs-n1"}}},
        )
    [problem] = refused.value.problems
    assert problem.field == "attributes.custom_attributes.host"
    assert "not allowed" in problem.reason and "filesystems, software" in (problem.offered or "")
    assert len(engine.store.find()) == before, "nothing was submitted"


# --- cancel and update ---------------------------------------------------------------------


def holding_profile(profile: Path, folder: Path) -> Path:
    """The PBS test profile whose jobs are all submitted held (`#PBS -h`, a site directive):
    queued jobs that never use the vnodes, for the tests of queued jobs."""
    document: dict[str, Any] = yaml.safe_load(profile.read_text())
    for resource in document["resources"]:
        directives = resource["scheduler"]["directives"]
        if "-h" not in directives:  # the resources share one scheduler mapping (an alias)
            directives.append("-h")
    path = folder / "pbs-holding.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.fixture
def holding(pbs_profile: Path, tmp_path: Path) -> Iterator[Engine]:
    """An engine whose jobs are submitted held; what it leaves unsettled is deleted."""
    data = tmp_path / "holding"
    data.mkdir()
    engine = make_engine(holding_profile(pbs_profile, tmp_path), data)
    yield engine
    delete_unsettled(engine)


def delete_unsettled(engine: Engine) -> None:
    for record in engine.store.unsettled():
        if record.native_id:
            subprocess.run(
                ["qdel", "-W", "force", record.native_id], capture_output=True, timeout=30
            )
    engine.close()


def test_cancel_of_a_held_and_of_a_running_job_on_both_resources(
    engine: Engine, holding: Engine
) -> None:
    """qdel of a held job ends it `F` without a run, of a running one with the signal's exit:
    both are `canceled`, locally and through SSH."""
    sleep = {
        "executable": "/bin/sleep",
        "arguments": ["300"],
        "resources": {"exclusive_node_use": False},
    }
    held = [submit(holding, resource, sleep) for resource in RESOURCES]
    running = [submit(engine, resource, sleep) for resource in RESOURCES]
    wait_until(holding, [r.id for r in held], lambda r: r.state == JobState.HELD)
    wait_until(engine, [r.id for r in running], lambda r: r.state == JobState.ACTIVE)
    for each, records in ((holding, held), (engine, running)):
        for record in records:
            each.cancel(owner=record.owner, job_id=record.id)
    for each, records in ((holding, held), (engine, running)):
        for record in final(each, *records):
            assert record.state == JobState.CANCELED, explain(each, record)
            assert record.native_id
            assert qstat_jobs(record.native_id)[record.native_id]["job_state"] == "F"


def test_update_of_a_queued_job_and_qalters_refusals_for_running_ones(
    engine: Engine, holding: Engine
) -> None:
    """A held job's walltime (qalter) and queue (qmove) change, as alice through SSH and as
    root. For a running job (the record still says queued: no poll yet, so the gateway lets
    the update through) the real qalter of OpenPBS 23.06.06 refuses alice's longer walltime
    with `Unauthorized Request` (exit 159; a manager such as root may lengthen it, a user may
    only shorten it) and an account change from anyone with `Cannot modify attribute while
    job running  Account_Name` (167): the gateway keeps those words, and the job is
    unchanged."""
    document = {
        "executable": "/bin/sleep",
        "arguments": ["300"],
        "attributes": {"duration": 300},
        "resources": {"exclusive_node_use": False},
    }
    queued = [submit(holding, resource, document) for resource in RESOURCES]
    running = [submit(engine, resource, document) for resource in RESOURCES]
    changes = JobChanges(duration=1800, queue_name="debug")
    for record in queued:
        assert record.native_id, record
        updated = holding.update(owner=record.owner, job_id=record.id, changes=changes).record
        assert updated.message == "updated", updated
        shown = qstat_jobs(record.native_id)[record.native_id]
        assert shown["Resource_List"]["walltime"] == "00:30:00", shown
        assert shown["queue"] == "debug", shown
    native = [record.native_id or "" for record in running]
    deadline = time.monotonic() + 60
    while any(qstat_jobs(n)[n]["job_state"] != "R" for n in native):
        assert time.monotonic() < deadline, qstat_jobs(*native)
        time.sleep(0.3)
    as_root, as_alice = running
    refusals = (
        (as_root, JobChanges(account="P9"), "Cannot modify attribute while job running"),
        (as_alice, JobChanges(duration=1800), "Unauthorized Request"),
    )
    for record, change, words in refusals:
        with pytest.raises(UpdateError) as refused:
            engine.update(owner=record.owner, job_id=record.id, changes=change)
        assert words in refused.value.stderr, refused.value
        assert refused.value.argv[0] == "qalter"
        assert record.native_id
        shown = qstat_jobs(record.native_id)[record.native_id]
        assert shown["Resource_List"]["walltime"] == "00:05:00", shown
        assert "Account_Name" not in shown, shown
        stored = engine.store.get(record.id)
        assert stored is not None and words in (stored.message or ""), stored


# --- the start-up reconcile by tag ---------------------------------------------------------


def submit_then_die(profile: str, data: str, resource: str) -> None:
    """Submit one job, and die by SIGKILL once qsub has returned and before the record gets
    the job's id (run in a process of its own, by the test below)."""
    engine = make_engine(Path(profile), Path(data))

    def die(*args: object, **kwargs: object) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    engine.store.set_native_id = die  # type: ignore[method-assign]
    document = {"executable": "/bin/sh", "arguments": ["-c", "echo once"]}
    submit(engine, resource, {**document, "resources": {"exclusive_node_use": False}})


CRASHING_SUBMITTER = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from tests.integration.test_pbs_engine import submit_then_die; "
    "submit_then_die(*sys.argv[2:])"
)


def jobs_tagged(tag: str) -> list[str]:
    """The ids of every job, finished ones too, whose `IRI_GATEWAY_TAG` (qsub's `-v`, in the
    Variable_List) is `tag`: from the text form of `qstat -x -f`, which any job's attribute
    values can be read in (the JSON form cannot, see qstat_jobs)."""
    shown = subprocess.run(
        ["qstat", "-x", "-f"], capture_output=True, timeout=60, check=True
    ).stdout.decode("utf-8", "replace")
    found = []
    for block in shown.split("Job Id: ")[1:]:
        native_id, _, body = block.partition("\n")
        unwrapped = body.replace("\n\t", "")  # qstat wraps long values with newline + tab
        if re.search(rf"[ ,]{TAG_VARIABLE}={re.escape(tag)}(,|\n|$)", unwrapped):
            found.append(native_id.strip())
    return sorted(found)


@pytest.mark.parametrize("resource", RESOURCES)
def test_crash_between_qsub_and_record_update_is_adopted_once(
    pbs_profile: Path, tmp_path: Path, resource: str
) -> None:
    """The submitting process is killed after qsub printed the id and before the record got
    it: the next engine's reconcile finds the job by its tag on the real server, records it
    once, and never submits it again."""
    crashed = subprocess.run(
        [
            sys.executable,
            "-c",
            CRASHING_SUBMITTER,
            str(ROOT),
            str(pbs_profile),
            str(tmp_path),
            resource,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    engine = make_engine(pbs_profile, tmp_path)
    try:
        (lost,) = engine.store.unsettled()
        assert lost.native_id is None
        (native_id,) = jobs_tagged(lost.tag)
        (action,) = engine.reconcile()
        assert action.startswith(f"{lost.id}: adopted "), action[:2000]
        assert engine.reconcile() == []
        (done,) = final(engine, lost)
        assert done.native_id == native_id
        assert done.state == JobState.COMPLETED, explain(engine, done)
        assert output(engine, done) == "once\n"
        assert jobs_tagged(lost.tag) == [native_id], "never submitted twice"
    finally:
        delete_unsettled(engine)
