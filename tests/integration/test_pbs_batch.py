"""`PbsBatch` against the real OpenPBS 23.06.06 of scripts/pbs (issue 26).

Scripts are rendered by the planner from the PBS test profile and submitted through
`LocalTransport()` (root, which the server's acl_roots lets submit) and
`LocalTransport(as_user="alice")`; what the server recorded is read with `qstat -f -F json -x`
directly, not through the adapter. Jobs that must stay queued are submitted held (`#PBS -h`),
never left to a slow scheduler. Each test submits its jobs together and waits for them
together; every job a test made is deleted (by id) at its end.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.errors import CancelError, RestartError, UpdateError
from iri_gateway.models.job import JobState, NativeStatus
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.planner import make_plan
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.schedulers.batch import JobChanges
from iri_gateway.schedulers.pbs.batch import PbsBatch
from iri_gateway.transport.base import CommandResult
from iri_gateway.transport.local import LocalTransport
from tests.integration.conftest import PbsInfo

pytestmark = pytest.mark.integration

WAIT = 240.0  # jobs of other test sessions may hold the four vnodes for a while
UNKNOWN = "99999.pbshost"
USERS = [None, "alice"]


class CountingTransport:
    """A LocalTransport that counts the commands it runs, by program."""

    def __init__(self, as_user: str | None = None) -> None:
        self.inner = LocalTransport(as_user=as_user)
        self.calls: list[list[str]] = []

    def run(self, argv: Sequence[str], **options: Any) -> CommandResult:
        self.calls.append(list(argv))
        return self.inner.run(argv, **options)

    def count(self, program: str) -> int:
        return sum(1 for argv in self.calls if argv[0] == program)


class Jobs:
    """Renders scripts from the PBS test profile, submits them, and deletes them afterwards."""

    def __init__(self, profile: Path, folder: Path) -> None:
        self.resource = ProfileRegistry.from_files([profile]).get("pbs")
        self.folder = folder
        folder.chmod(0o777)  # alice's jobs write their output here too
        self.made: list[str] = []

    def script(
        self, command: str, *, held: bool = False, rerunnable: bool = True, **more: Any
    ) -> str:
        spec: dict[str, Any] = {
            "name": more.pop("name", "pbs-batch"),
            "executable": "/bin/bash",
            "arguments": ["-c", command],
            "directory": str(self.folder),
            "stdout_path": f"out.{len(self.made)}",
            "resources": more.pop("resources", {"node_count": 1, "processes_per_node": 1}),
            "attributes": {"duration": 600, **more.pop("attributes", {})},
            "launcher": "single",
        }
        spec.update(more)
        script = make_plan(parse_jobspec(spec), self.resource).script
        extra = ("#PBS -h\n" if held else "") + ("" if rerunnable else "#PBS -r n\n")
        shebang, _, rest = script.partition("\n")
        return f"{shebang}\n{extra}{rest}"

    def submit(self, batch: PbsBatch, script: str, tag: str) -> str:
        job_id = batch.submit(script, tag=tag)
        self.made.append(job_id)
        return job_id

    def delete_all(self) -> None:
        for job_id in self.made:
            subprocess.run(["qdel", "-W", "force", job_id], capture_output=True, timeout=30)


@pytest.fixture
def jobs(pbs: PbsInfo, pbs_profile: Path) -> Iterator[Jobs]:
    # Not under tmp_path: pytest makes it 0700 (alice's jobs could not enter it), and other
    # pytest sessions on this machine prune old basetemp folders while jobs still run there.
    folder = Path(tempfile.mkdtemp(prefix="iri-pbs-batch-", dir="/tmp"))
    made = Jobs(pbs_profile, folder)
    yield made
    made.delete_all()
    shutil.rmtree(folder, ignore_errors=True)


def server_job(job_id: str) -> dict[str, Any]:
    """The job as the server recorded it, read without the adapter."""
    done = subprocess.run(
        ["qstat", "-f", "-F", "json", "-x", job_id],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    attributes: dict[str, Any] = json.loads(done.stdout)["Jobs"][job_id]
    return attributes


def wait_for(
    batch: PbsBatch,
    job_ids: Collection[str],
    done: Callable[[NativeStatus], bool],
    timeout: float = WAIT,
) -> dict[str, NativeStatus]:
    """Poll the adapter until `done` holds for every job; fail with what was seen."""
    deadline = time.monotonic() + timeout
    while True:
        seen = batch.statuses(job_ids)
        if all(job_id in seen and done(seen[job_id]) for job_id in job_ids):
            return seen
        assert time.monotonic() < deadline, f"not there in {timeout} s: {seen}"
        time.sleep(0.5)


def running(status: NativeStatus) -> bool:
    return status.native_state == "R"


def finished(status: NativeStatus) -> bool:
    return status.native_state == "F"


def started(job: dict[str, Any]) -> bool:
    """The MOM has the job's session. A qdel before that (state R already) races the start: the
    real OpenPBS 23.06.06 then sent TermJob, and the obituary came ~10 s later as `... and
    finished`, substate 92, Exit_status 0: nothing in qstat says it was deleted (reported to
    the lead: the gateway would call it completed)."""
    return "session_id" in job


def wait_server(job_id: str, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while True:
        job = server_job(job_id)
        if done(job):
            return job
        assert time.monotonic() < deadline, f"{job_id} not there in {WAIT} s: {job}"
        time.sleep(0.5)


@pytest.mark.parametrize("user", USERS)
def test_rendered_script_is_recorded_as_the_planner_asked(jobs: Jobs, user: str | None) -> None:
    """select chunks of several nodes with ngpus, place, walltime, queue, -A, the custom
    attributes and the profile's `filesystems` reach the server as qsub read them; the tag
    lands in Variable_List. Held, so nothing runs."""
    batch = PbsBatch(LocalTransport(as_user=user))
    script = jobs.script(
        "true",
        held=True,
        name="pbs-shape",
        resources={"node_count": 2, "processes_per_node": 1, "gpu_cores_per_process": 2},
        attributes={
            "duration": 1234,
            "queue_name": "debug",
            "account": "Proj123",
            "custom_attributes": {"software": "gromacs-2024"},
        },
    )
    tag = f"iri-gateway:shape-{user}"
    job_id = jobs.submit(batch, script, tag)
    assert job_id.endswith(".pbshost") and job_id.split(".")[0].isdigit()
    job = server_job(job_id)
    assert job["Job_Owner"].startswith(f"{user or 'root'}@")
    assert (job["Job_Name"], job["queue"], job["Account_Name"]) == ("pbs-shape", "debug", "Proj123")
    resources = job["Resource_List"]
    assert resources["select"] == "2:ncpus=2:mpiprocs=1:ngpus=2"
    assert resources["place"] == "scatter:excl"
    assert resources["walltime"] == "00:20:34"
    assert (resources["ngpus"], resources["nodect"]) == (4, 2)
    assert resources["software"] == "gromacs-2024"
    assert resources["filesystems"] == "home:eagle"
    assert job["Variable_List"]["IRI_GATEWAY_TAG"] == tag
    assert (job["job_state"], job["Hold_Types"]) == ("H", "u")
    status = batch.statuses([job_id])[job_id]
    assert (status.state, status.native_state) == (JobState.HELD, "H")


@pytest.mark.parametrize("user", USERS)
def test_statuses_of_every_kind_of_job_in_one_qstat_call(jobs: Jobs, user: str | None) -> None:
    """Queued (held), running, finished, failed (exit 3), killed by a signal, walltime-killed,
    deleted while running and deleted while queued, and an unknown id, in ONE qstat call.

    The real OpenPBS 23.06.06: a script killed by SIGKILL records Exit_status 137 (the shell's
    128 + 9, not 256 + 9); a walltime kill -29 with the comment `... and exceeded resource
    walltime`; a running job deleted with qdel an Exit_status of its shell's
    race with the kill (0, 143 and 271 were all seen: the state says `canceled`), substate 91
    and `... and terminated by <user>@<host>`; a queued one substate 91 with neither comment
    nor exit status."""
    transport = CountingTransport(user)
    batch = PbsBatch(transport)  # type: ignore[arg-type]
    commands = {
        "ok": ("exit 0", {}),
        "fail": ("exit 3", {}),
        "signal": ("kill -KILL $$", {}),
        "walltime": ("sleep 100", {"attributes": {"duration": 2}}),
        "run": ("sleep 300", {}),
        "delrun": ("sleep 300", {}),
    }
    ids = {
        key: jobs.submit(batch, jobs.script(command, **more), f"iri-gateway:{key}-{user}")
        for key, (command, more) in commands.items()
    }
    held = jobs.submit(batch, jobs.script("true", held=True), f"iri-gateway:held-{user}")
    delheld = jobs.submit(batch, jobs.script("true", held=True), f"iri-gateway:delheld-{user}")
    ends = [ids[key] for key in ("ok", "fail", "signal", "walltime")]
    wait_for(batch, [ids["run"], ids["delrun"]], running)
    wait_server(ids["delrun"], started)
    batch.cancel(ids["delrun"])
    batch.cancel(delheld)
    wait_for(batch, [*ends, ids["delrun"], delheld], finished)

    transport.calls.clear()
    everything = [*ids.values(), held, delheld, UNKNOWN]
    seen = batch.statuses(everything)
    assert transport.count("qstat") == 1, transport.calls
    assert UNKNOWN not in seen, "an id the server does not know is left out"
    summary = {key: (seen[job_id].state, seen[job_id].exit_code) for key, job_id in ids.items()}
    assert summary == {
        "ok": (JobState.COMPLETED, 0),
        "fail": (JobState.FAILED, 3),
        "signal": (JobState.FAILED, 137),
        "walltime": (JobState.FAILED, -29),
        "run": (JobState.ACTIVE, None),
        "delrun": (JobState.CANCELED, seen[ids["delrun"]].exit_code),
    }
    assert (seen[held].state, seen[delheld].state) == (JobState.HELD, JobState.CANCELED)
    assert seen[delheld].exit_code is None and seen[delheld].reason is None
    assert seen[ids["fail"]].message.endswith("and failed), exit code 3")
    walltime = seen[ids["walltime"]].reason or ""
    assert walltime.startswith("JOB_EXEC_KILL_WALLTIME (-29): killed for exceeding walltime; ")
    assert walltime.endswith("and exceeded resource walltime")
    assert (seen[ids["run"]].reason or "").startswith("Job run at ")
    assert f"and terminated by {user or 'root'}@" in (seen[ids["delrun"]].reason or "")


def test_cancel_of_queued_running_finished_and_unknown_jobs(jobs: Jobs) -> None:
    """qdel of a finished job answers `qdel: Job has finished <id>` (35): not an error; an
    unknown id `qdel: Unknown Job Id <id>` (153): a CancelError in qdel's words."""
    batch = PbsBatch(LocalTransport(as_user="alice"))
    queued = jobs.submit(batch, jobs.script("true", held=True), "iri-gateway:c-queued")
    active = jobs.submit(batch, jobs.script("sleep 300"), "iri-gateway:c-running")
    done = jobs.submit(batch, jobs.script("true"), "iri-gateway:c-done")
    wait_for(batch, [active], running)
    wait_server(active, started)
    wait_for(batch, [done], finished)
    for job_id in (queued, active, done):
        batch.cancel(job_id)
    seen = wait_for(batch, [queued, active], finished)
    assert {seen[queued].state, seen[active].state} == {JobState.CANCELED}
    assert batch.statuses([done])[done].state is JobState.COMPLETED, "the qdel changed nothing"
    batch.cancel(active)  # now in the history too
    with pytest.raises(CancelError) as caught:
        batch.cancel(UNKNOWN)
    assert caught.value.exit_code == 153
    assert f"qdel: Unknown Job Id {UNKNOWN}" in caught.value.stderr


@pytest.mark.parametrize("user", USERS)
def test_update_of_a_held_job(jobs: Jobs, user: str | None) -> None:
    """qalter (walltime, name, account) then qmove (queue) on a held job: the server records
    each; a queue that does not exist is refused in qmove's words (170)."""
    batch = PbsBatch(LocalTransport(as_user=user))
    job_id = jobs.submit(batch, jobs.script("true", held=True), f"iri-gateway:u-{user}")
    batch.update(
        job_id, JobChanges(duration=3000, name="renamed", account="Proj9", queue_name="debug")
    )
    job = server_job(job_id)
    assert job["Resource_List"]["walltime"] == "00:50:00"
    assert (job["Job_Name"], job["Account_Name"], job["queue"]) == ("renamed", "Proj9", "debug")
    with pytest.raises(UpdateError) as caught:
        batch.update(job_id, JobChanges(queue_name="nosuchqueue"))
    assert caught.value.exit_code == 170
    assert caught.value.stderr.strip() == f"qmove: Unknown queue {job_id}"


def test_update_of_a_running_job_is_refused_in_the_servers_words(jobs: Jobs) -> None:
    """The real OpenPBS 23.06.06 refuses a running job's account for everyone
    (`qalter: Cannot modify attribute while job running  Account_Name <id>`, 167) and its
    walltime raised by a user (`qalter: Unauthorized Request  <id>`, 159: only a manager may; a
    user may lower it), and
    any qmove (`qmove: Request invalid for state of job <id>`, 168)."""
    root, alice = PbsBatch(LocalTransport()), PbsBatch(LocalTransport(as_user="alice"))
    mine = jobs.submit(root, jobs.script("sleep 300"), "iri-gateway:ur-root")
    hers = jobs.submit(alice, jobs.script("sleep 300"), "iri-gateway:ur-alice")
    wait_for(root, [mine, hers], running)
    refusals = [
        (
            root,
            mine,
            JobChanges(account="Proj9"),
            167,
            "qalter: Cannot modify attribute while job running  Account_Name",
        ),
        (alice, hers, JobChanges(duration=1200), 159, "qalter: Unauthorized Request "),
        (
            alice,
            hers,
            JobChanges(queue_name="debug"),
            168,
            "qmove: Request invalid for state of job",
        ),
    ]
    for batch, job_id, changes, code, words in refusals:
        with pytest.raises(UpdateError) as caught:
            batch.update(job_id, changes)
        assert caught.value.exit_code == code, caught.value.stderr
        assert caught.value.stderr.strip().startswith(words), caught.value.stderr
        assert caught.value.stderr.strip().endswith(job_id)


def test_restart_reruns_a_running_job_and_refusals_keep_qreruns_words(jobs: Jobs) -> None:
    """qrerun (a manager's command: root here) puts a running job back under the same id; the
    real refusals: queued `Request invalid for state of job <id>` (168), finished `Job has
    finished` WITHOUT the id (35), `-r n` `job is not rerunnable <id>` (190, lower case), a
    user `Unauthorized Request  <id>` (159)."""
    root, alice = PbsBatch(LocalTransport()), PbsBatch(LocalTransport(as_user="alice"))
    again = jobs.submit(root, jobs.script("sleep 300"), "iri-gateway:r-again")
    once = jobs.submit(root, jobs.script("sleep 300", rerunnable=False), "iri-gateway:r-once")
    hers = jobs.submit(alice, jobs.script("sleep 300"), "iri-gateway:r-alice")
    queued = jobs.submit(root, jobs.script("true", held=True), "iri-gateway:r-queued")
    done = jobs.submit(root, jobs.script("true"), "iri-gateway:r-done")
    wait_for(root, [again, once, hers], running)
    wait_for(root, [done], finished)
    assert root.requeue(again) == f"qrerun {again}"
    wait_server(again, lambda job: job.get("run_count") == 2 and job["job_state"] == "R")
    refusals = [
        (root, queued, 168, f"qrerun: Request invalid for state of job {queued}"),
        (root, done, 35, "qrerun: Job has finished"),
        (root, once, 190, f"qrerun: job is not rerunnable {once}"),
        (alice, hers, 159, f"qrerun: Unauthorized Request  {hers}"),
        (root, UNKNOWN, 153, f"qrerun: Unknown Job Id {UNKNOWN}"),
    ]
    for batch, job_id, code, words in refusals:
        with pytest.raises(RestartError) as caught:
            batch.requeue(job_id)
        assert (caught.value.exit_code, caught.value.stderr.strip()) == (code, words)


def test_find_by_tag_in_live_and_finished_jobs(jobs: Jobs) -> None:
    batch = PbsBatch(LocalTransport(as_user="alice"))
    done = jobs.submit(batch, jobs.script("true"), "iri-gateway:f-done")
    queued = jobs.submit(batch, jobs.script("true", held=True), "iri-gateway:f-queued")
    wait_for(batch, [done], finished)
    assert batch.find("iri-gateway:f-done") == done, "qstat -x: the history too"
    assert batch.find("iri-gateway:f-queued") == queued
    assert batch.find("iri-gateway:f-never-submitted") is None


def test_many_statuses_are_one_qstat_call(jobs: Jobs) -> None:
    transport = CountingTransport("alice")
    batch = PbsBatch(transport)  # type: ignore[arg-type]
    ids = [
        jobs.submit(batch, jobs.script("true", held=True), f"iri-gateway:m-{n}") for n in range(12)
    ]
    transport.calls.clear()
    seen = batch.statuses([*ids, UNKNOWN, "99998.pbshost"])
    assert transport.count("qstat") == 1 and len(transport.calls) == 1, transport.calls
    assert set(seen) == set(ids)
    assert {status.state for status in seen.values()} == {JobState.HELD}
    assert batch.statuses([UNKNOWN]) == {}


def test_a_non_ascii_account_does_not_hide_the_other_jobs(jobs: Jobs) -> None:
    """A job of the same account with `café€` as its PBS account (submitted with qsub outside
    the gateway: the gateway refuses non-ASCII directive values since issue 26); the real
    qstat prints the first byte of `€` as an unescaped '"', which made the whole `qstat -F
    json` answer unreadable, so every job of the query lost its status (and `find` failed).
    Both now work."""
    batch = PbsBatch(LocalTransport(as_user="alice"))
    script = jobs.script("true", held=True).replace("#PBS -h\n", "#PBS -h\n#PBS -A café€\n", 1)
    assert "#PBS -A café€" in script
    odd = jobs.submit(batch, script, "iri-gateway:odd-account")
    plain = jobs.submit(batch, jobs.script("true", held=True), "iri-gateway:plain-account")
    seen = batch.statuses([odd, plain])
    assert {seen[odd].state, seen[plain].state} == {JobState.HELD}
    assert batch.find("iri-gateway:plain-account") == plain
