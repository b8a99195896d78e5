"""The engine on the `local` resource: real bash processes, a real SQLite store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.planner import make_plan
from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile
from iri_gateway.service.jobs.engine import Engine, IdempotencyConflictError, JobNotFoundError
from iri_gateway.service.jobs.poller import Poller
from iri_gateway.service.operations.backends import Backends
from iri_gateway.service.operations.store import JobRecord, JobStore


def make_engine(data: Path) -> Engine:
    registry = ProfileRegistry.from_files([builtin_profile("local")])
    return Engine(
        registry=registry, store=JobStore(f"sqlite:///{data}/jobs.db"), backends=Backends(data)
    )


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    return make_engine(tmp_path)


def wait_for(
    engine: Engine, job_id: str, done: Callable[[JobRecord], bool], timeout: float = 20
) -> JobRecord:
    poller = Poller(engine, fast=0.05)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        poller.cycle(force=True)
        record = engine.store.get(job_id)
        assert record is not None
        if done(record):
            return record
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} still {engine.store.get(job_id)}")


def shell_job(command: str, **extra: object) -> object:
    return parse_jobspec({"executable": "/bin/sh", "arguments": ["-c", command], **extra})


def test_submit_runs_to_completion_and_output_is_readable(engine: Engine) -> None:
    submission = engine.submit(
        owner="alice", resource_id="local", spec=shell_job("echo hello; echo oops >&2")
    )  # type: ignore[arg-type]
    record = submission.record
    assert record.state == JobState.QUEUED, "visible as queued at once, never 'not found'"
    assert record.native_id is not None
    record = wait_for(engine, record.id, lambda r: r.state.final)
    assert record.state == JobState.COMPLETED and record.exit_code == 0
    states = [entry["state"] for entry in record.history]
    assert states[0] == "new" and states[-1] == "completed" and "queued" in states
    assert engine.read_output(owner="alice", job_id=record.id) == "hello\n"
    assert engine.read_output(owner="alice", job_id=record.id, stream="stderr") == "oops\n"
    assert engine.read_output(owner="alice", job_id=record.id, tail=3) == "lo\n"
    assert engine.read_output(owner="alice", job_id=record.id, head=2) == "he"
    assert engine.read_output(owner="alice", job_id=record.id, offset=1, length=3) == "ell"


def test_failing_job_reports_its_exit_code(engine: Engine) -> None:
    record = engine.submit(owner="alice", resource_id="local", spec=shell_job("exit 3")).record  # type: ignore[arg-type]
    record = wait_for(engine, record.id, lambda r: r.state.final)
    assert record.state == JobState.FAILED and record.exit_code == 3
    assert "exit code 3" in (record.message or "")


def test_cancel_stops_the_process(engine: Engine, tmp_path: Path) -> None:
    marker = tmp_path / "still-running"
    record = engine.submit(
        owner="alice",
        resource_id="local",
        spec=shell_job(f"sleep 30; touch {marker}"),  # type: ignore[arg-type]
    ).record
    wait_for(engine, record.id, lambda r: r.state == JobState.ACTIVE)
    engine.cancel(owner="alice", job_id=record.id)
    record = wait_for(engine, record.id, lambda r: r.state.final)
    assert record.state == JobState.CANCELED
    assert not marker.exists()


def test_cancel_stops_what_left_the_jobs_process_group(engine: Engine, tmp_path: Path) -> None:
    """`timeout` puts its program in a process group of its own: a cancel reaches it too
    (every process of the job's session), not only the job's own group."""
    pid_file = tmp_path / "sleeper.pid"
    record = engine.submit(
        owner="alice",
        resource_id="local",
        spec=shell_job(f"timeout 300 sh -c 'echo $$ > {pid_file}; exec sleep 300'"),  # type: ignore[arg-type]
    ).record
    wait_for(engine, record.id, lambda r: r.state == JobState.ACTIVE)
    deadline = time.monotonic() + 20
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline, "the job's sleeper did not start"
        time.sleep(0.05)
    sleeper = int(pid_file.read_text())
    assert os.getpgid(sleeper) != os.getsid(sleeper), "timeout made no group of its own"
    engine.cancel(owner="alice", job_id=record.id)
    assert wait_for(engine, record.id, lambda r: r.state.final).state == JobState.CANCELED
    deadline = time.monotonic() + 10
    while Path(f"/proc/{sleeper}").exists() and "Z" not in _state_of(sleeper):
        assert time.monotonic() < deadline, f"process {sleeper} outlived the cancel"
        time.sleep(0.05)


def _state_of(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return stat[stat.rfind(")") + 2 :].split()[0]


def test_other_users_jobs_are_not_found(engine: Engine) -> None:
    record = engine.submit(owner="alice", resource_id="local", spec=shell_job("true")).record  # type: ignore[arg-type]
    with pytest.raises(JobNotFoundError):
        engine.get(owner="bob", job_id=record.id)
    with pytest.raises(JobNotFoundError):
        engine.cancel(owner="bob", job_id=record.id)
    with pytest.raises(JobNotFoundError):
        engine.read_output(owner="bob", job_id=record.id)


def test_idempotency_key(engine: Engine) -> None:
    spec = shell_job("true")
    first = engine.submit(
        owner="alice",
        resource_id="local",
        spec=spec,  # type: ignore[arg-type]
        idempotency_key="k1",
    )
    again = engine.submit(
        owner="alice",
        resource_id="local",
        spec=spec,  # type: ignore[arg-type]
        idempotency_key="k1",
    )
    assert again.replayed and again.record.id == first.record.id and not first.replayed
    with pytest.raises(IdempotencyConflictError):
        engine.submit(
            owner="alice", resource_id="local", spec=shell_job("false"), idempotency_key="k1"
        )  # type: ignore[arg-type]
    other_user = engine.submit(
        owner="bob",
        resource_id="local",
        spec=spec,  # type: ignore[arg-type]
        idempotency_key="k1",
    )
    assert other_user.record.id != first.record.id
    assert len(list((engine.backends.data_dir / "local-jobs").iterdir())) == 2


CRASHING_SUBMITTER = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.service.jobs.test_engine_local import make_engine
from iri_gateway.planning.jobspec_io import parse_jobspec

engine = make_engine(Path({data!r}))
def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
engine.store.set_native_id = die  # the scheduler has the job; the record never learns it
engine.submit(owner="alice", resource_id="local",
              spec=parse_jobspec({{"executable": "/bin/sh", "arguments": ["-c", "echo once"]}}))
"""


def test_crash_between_submit_and_record_update_is_adopted(tmp_path: Path) -> None:
    root = str(Path(__file__).parents[3])  # the repository
    script = CRASHING_SUBMITTER.format(root=root, data=str(tmp_path))
    crashed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert crashed.returncode == -9, crashed.stderr
    engine = make_engine(tmp_path)
    (lost,) = engine.store.unsettled()
    assert lost.native_id is None and lost.submit_attempted_at is not None
    actions = engine.reconcile()
    assert actions == [f"{lost.id}: adopted {lost.id}"]
    record = wait_for(engine, lost.id, lambda r: r.state.final)
    assert record.state == JobState.COMPLETED
    assert engine.read_output(owner="alice", job_id=lost.id) == "once\n"
    assert len(list((tmp_path / "local-jobs").iterdir())) == 1, "never submitted twice"
    assert engine.reconcile() == []


def test_record_that_never_reached_the_scheduler_is_resubmitted(engine: Engine) -> None:
    loaded = engine.registry.get("local")
    spec = shell_job("echo resubmitted")
    plan = make_plan(
        spec.model_copy(
            update={  # type: ignore[attr-defined]
                "directory": str(engine.backends.data_dir / "work" / "x"),
                "stdout_path": "stdout.txt",
                "stderr_path": "stderr.txt",
            }
        ),
        loaded,
    )
    record = engine.store.create(
        owner="alice",
        resource_id="local",
        spec={},
        effective_spec={
            "executable": "/bin/sh",
            "arguments": ["-c", "echo resubmitted"],
            "directory": str(engine.backends.data_dir / "work" / "x"),
            "stdout_path": "stdout.txt",
            "stderr_path": "stderr.txt",
        },
        plan=plan.model_dump(mode="json", exclude={"script"}),
        script=plan.script,
    )
    engine.store.mark_submit_attempt(record.id)
    assert engine.reconcile() == [f"{record.id}: resubmitted (the scheduler never saw it)"]
    done = wait_for(engine, record.id, lambda r: r.state.final)
    assert done.state == JobState.COMPLETED
    assert engine.read_output(owner="alice", job_id=record.id) == "resubmitted\n"


def test_unknown_outcome_older_than_the_history_window_is_marked_lost(tmp_path: Path) -> None:
    clock = [1000.0]
    registry = ProfileRegistry.from_files([builtin_profile("local")])
    engine = Engine(
        registry=registry,
        store=JobStore(f"sqlite:///{tmp_path}/j.db", clock=lambda: clock[0]),
        backends=Backends(tmp_path),
        clock=lambda: clock[0],
    )
    record = engine.store.create(
        owner="a", resource_id="local", spec={}, effective_spec={}, plan={}, script=""
    )
    engine.store.mark_submit_attempt(record.id)
    clock[0] += 301
    assert engine.reconcile() == [f"{record.id}: marked lost"]
    assert engine.store.get(record.id).state == JobState.FAILED  # type: ignore[union-attr]


def test_store_survives_restart(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    record = engine.submit(owner="alice", resource_id="local", spec=shell_job("true")).record  # type: ignore[arg-type]
    again = make_engine(tmp_path)
    assert again.get(owner="alice", job_id=record.id).script == record.script
    assert json.dumps(again.get(owner="alice", job_id=record.id).spec)
    assert os.path.exists(tmp_path / "jobs.db")


def test_a_cluster_job_on_the_local_resource(engine: Engine) -> None:
    """Roles on `local`: every member a local process, names resolving to this machine."""
    report = (
        'echo "$IRI_CLUSTER_ROLE $IRI_CLUSTER_ROLE_INDEX $IRI_CLUSTER_SIZE '
        '$IRI_CLUSTER_HOSTS"; cat "$IRI_CLUSTER_DIR/hosts"'
    )
    spec = parse_jobspec(
        {
            "executable": "/bin/sh",
            "arguments": ["-c", report],
            # Every member to its end: the primary's quick end must not stop the clients first.
            "cluster_lifecycle": "all_must_end",
            "roles": [
                {"name": "server", "count": 1},
                {
                    "name": "client",
                    "count": 2,
                    "arguments": ["-c", f'{report}; [ "$IRI_CLUSTER_ROLE_INDEX" = 1 ]'],
                },
            ],
        }
    )
    record = engine.submit(owner="alice", resource_id="local", spec=spec).record
    record = wait_for(engine, record.id, lambda r: r.state.final)
    # client2 exits 1 (its index is not 1): the job fails and names it.
    assert record.state == JobState.FAILED, record
    assert record.message is not None and record.message.startswith(
        "member client2 (role client, on "
    ), record.message
    primary = engine.read_output(owner="alice", job_id=record.id)
    assert primary.splitlines()[0] == "server 1 3 server1,client1,client2"
    assert "127.0.0.1\tclient2" in primary
    folder = Path(record.effective_spec["directory"]) / f".iri-cluster-{record.native_id}"
    assert (folder / "client1.out").read_text().splitlines()[0] == (
        "client 1 3 server1,client1,client2"
    )
    states = {m["name"]: (m["state"], m["exit_code"]) for m in record.members}
    assert states["client2"] == ("failed", 1) and states["client1"] == ("completed", 0)


def test_a_job_ending_while_its_status_is_read_is_not_called_vanished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wrapper writes the exit code and ends between the status's look for the exit file
    and its look for the process (seen under load): the job ended with its code, it did not
    vanish."""
    from iri_gateway.schedulers.local import batch as local_batch

    folder = tmp_path / "job1"
    folder.mkdir()
    (folder / "pid").write_text("999999")

    def ends_now(pid: int, where: Path) -> bool:
        (where / "exit_code").write_text("3\n")  # the wrapper finishes at this very moment
        return False

    monkeypatch.setattr(local_batch, "_alive_in", ends_now)
    status = local_batch.LocalBatch(tmp_path).statuses(["job1"])["job1"]
    assert (status.state, status.exit_code) == (JobState.FAILED, 3), status
