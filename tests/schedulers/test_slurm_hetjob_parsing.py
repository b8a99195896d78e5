"""Heterogeneous Slurm jobs tracked as one job, from output recorded on the test cluster.

The samples in `tests/data/slurm/` are real squeue and `sacct -c` output of 2-component het
jobs (see the README there); `SlurmBatch` reads them through a transport that answers with
them, so the whole status path (squeue, then sacct for finished jobs) is exercised. The
restart of a (het) job, `scontrol requeue` and the lifting of Slurm's requeue delay, is
checked on scripted answers.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from iri_gateway.errors import RestartError
from iri_gateway.models.job import JobState, NativeStatus
from iri_gateway.schedulers.slurm import hetjob, sacct, squeue
from iri_gateway.schedulers.slurm.batch import SlurmBatch
from iri_gateway.transport.base import CommandResult
from iri_gateway.transport.scripted import Answer, ScriptedTransport
from tests.support.paths import TESTS

DATA = TESTS / "data" / "slurm"


def recorded(name: str, argv: Sequence[str] = ("squeue",)) -> CommandResult:
    stderr = DATA / name.replace(".txt", ".stderr")
    return CommandResult(
        tuple(argv), 0, (DATA / name).read_text(), stderr.read_text() if stderr.exists() else ""
    )


def answers(squeue_file: str, sacct_file: str | None = None) -> ScriptedTransport:
    """A transport that answers squeue and sacct with recorded output (sacct with nothing
    when no file is named), and records the calls; any other command fails the test."""
    transport = ScriptedTransport()
    for program, name in (("squeue", squeue_file), ("sacct", sacct_file)):
        result = recorded(name, [program]) if name is not None else None
        transport.on(program, reply=Answer(result.stdout, result.stderr) if result else Answer())
    return transport


@pytest.mark.parametrize(
    ("name", "leader", "state", "message"),
    [
        ("squeue-het-held.txt", "30309", JobState.HELD, "PENDING (JobHeldUser)"),
        ("squeue-het-queued.txt", "30325", JobState.QUEUED, "PENDING (BeginTime)"),
        ("squeue-het-running.txt", "30330", JobState.ACTIVE, "RUNNING"),
        ("squeue-het-completed.txt", "30330", JobState.COMPLETED, "COMPLETED"),
        ("squeue-het-failed.txt", "30313", JobState.FAILED, "FAILED (NonZeroExitCode)"),
        ("squeue-het-canceled.txt", "30317", JobState.CANCELED, "CANCELLED"),
        ("squeue-het-canceled.txt", "30315", JobState.CANCELED, "CANCELLED (JobHeldUser)"),
        (
            "squeue-het-one-canceled-running.txt",
            "30319",
            JobState.ACTIVE,
            "RUNNING (components 30319+0 RUNNING, 30319+1 CANCELLED)",
        ),
        (
            "squeue-het-one-canceled-completed.txt",
            "30323",
            JobState.CANCELED,
            "CANCELLED (components 30323+0 COMPLETED, 30323+1 CANCELLED)",
        ),
    ],
)
def test_components_in_the_queue_fold_into_the_leader(
    name: str, leader: str, state: JobState, message: str
) -> None:
    queue = squeue.parse(recorded(name))
    status = queue.statuses[leader]
    assert (status.native_id, status.state, status.message) == (leader, state, message)
    assert not [job_id for job_id in queue.statuses if "+" in job_id], "no component left over"
    assert [c.native_id for c in queue.components[leader]] == [f"{leader}+0", f"{leader}+1"]


def test_plain_jobs_beside_a_het_job_are_untouched_and_tags_name_the_leader() -> None:
    queue = squeue.parse(recorded("squeue-het-running.txt"))
    assert set(queue.statuses) == {"30329", "30330"}
    assert queue.statuses["30329"] == NativeStatus(
        "30329", JobState.ACTIVE, "RUNNING", None, "None"
    )
    assert queue.tags == {"iri-gateway:plain-1": "30329", "iri-gateway:het-1": "30330"}
    assert "30329" not in queue.components


def test_batch_reports_a_running_het_job_without_asking_the_history() -> None:
    transport = answers("squeue-het-running.txt")
    statuses = SlurmBatch(transport).statuses(["30330"])
    assert statuses["30330"].state == JobState.ACTIVE
    assert transport.programs() == ["squeue"]


def test_batch_finds_a_het_job_by_its_tag() -> None:
    assert SlurmBatch(answers("squeue-het-running.txt")).find("iri-gateway:het-1") == "30330"


@pytest.mark.parametrize(
    ("squeue_file", "sacct_file", "leader", "state", "exit_code", "message"),
    [
        (
            "squeue-het-completed.txt",
            "sacct-c-het-completed.txt",
            "30330",
            JobState.COMPLETED,
            0,
            "COMPLETED, exit code 0",
        ),
        (
            "squeue-het-failed.txt",
            "sacct-c-het-failed.txt",
            "30313",
            JobState.FAILED,
            5,
            "FAILED, exit code 5",
        ),
        # jobcomp says COMPLETED for the leader; the live queue saw component 1 cancelled.
        (
            "squeue-het-one-canceled-completed.txt",
            "sacct-c-het-one-canceled-completed.txt",
            "30323",
            JobState.CANCELED,
            None,
            "CANCELLED (components 30323+0 COMPLETED, 30323+1 CANCELLED)",
        ),
    ],
)
def test_batch_joins_the_queue_and_the_jobcomp_record_of_a_finished_het_job(
    squeue_file: str,
    sacct_file: str,
    leader: str,
    state: JobState,
    exit_code: int | None,
    message: str,
) -> None:
    transport = answers(squeue_file, sacct_file)
    status = SlurmBatch(transport).statuses([leader])[leader]
    assert (status.state, status.exit_code, status.message) == (state, exit_code, message)
    sacct_argv = transport.calls[1].argv
    assert sacct_argv[:2] == ("sacct", "-c") and f"--jobs={leader}" in sacct_argv


def test_batch_takes_the_jobcomp_record_when_the_queue_has_forgotten_the_job() -> None:
    transport = answers("squeue-het-queued.txt", "sacct-c-het-failed.txt")  # 30313 gone
    status = SlurmBatch(transport).statuses(["30313"])["30313"]
    assert (status.state, status.exit_code, status.message) == (
        JobState.FAILED,
        5,
        "FAILED, exit code 5",
    )


def test_jobcomp_lists_second_components_under_their_own_ids() -> None:
    """What `sacct -c` printed for two leaders and their second components (see README)."""
    past = sacct.parse(recorded("sacct-c-het-canceled-components.txt", ["sacct"]))
    assert sorted(past) == ["30315", "30316", "30317", "30318"]
    assert {status.state for status in past.values()} == {JobState.CANCELED}


def test_jobcomp_complaints_about_het_fields_are_not_an_error() -> None:
    result = recorded("sacct-c-het-completed.txt", ["sacct"])
    assert "Unknown type HetJobId" in result.stderr
    assert sacct.parse(result)["30330"].state == JobState.COMPLETED


def test_accounting_components_fold_into_the_leader() -> None:
    """`sacct -X` with slurmdbd names components `93+0` (Slurm's documentation; the test
    cluster has no slurmdbd, so this sample is written by hand in that form)."""
    text = "93+0|COMPLETED|0:0\n93+1|FAILED|2:0\n93+1.0|FAILED|2:0\n94|COMPLETED|0:0\n"
    past = sacct.parse(CommandResult(("sacct",), 0, text, ""))
    assert set(past) == {"93", "94"}
    assert (past["93"].state, past["93"].exit_code) == (JobState.FAILED, 2)
    assert past["93"].message == ("FAILED (components 93+0 COMPLETED, 93+1 FAILED), exit code 2")


def status(
    job_id: str, state: JobState | None, native: str, code: int | None = None
) -> NativeStatus:
    return NativeStatus(job_id, state, native, code)


def test_failed_wins_over_canceled_and_keeps_its_own_exit_code() -> None:
    job = hetjob.aggregate(
        "7",
        [
            status("7+0", JobState.CANCELED, "CANCELLED by 0", 0),
            status("7+1", JobState.FAILED, "OUT_OF_MEMORY", 137),
            status("7+2", JobState.COMPLETED, "COMPLETED", 0),
        ],
    )
    assert (job.state, job.native_state, job.exit_code) == (JobState.FAILED, "OUT_OF_MEMORY", 137)


def test_a_component_in_an_unknown_state_keeps_the_job_from_being_final() -> None:
    job = hetjob.aggregate(
        "7", [status("7+0", JobState.COMPLETED, "COMPLETED"), status("7+1", None, "SOMETHING_NEW")]
    )
    assert job.state == JobState.ACTIVE, "one component has ended, so the job has started"
    waiting = hetjob.aggregate(
        "7", [status("7+0", JobState.QUEUED, "PENDING"), status("7+1", None, "SOMETHING_NEW")]
    )
    assert (waiting.state, waiting.native_state) == (None, "SOMETHING_NEW")


def test_held_when_any_component_is_held() -> None:
    job = hetjob.aggregate(
        "7", [status("7+0", JobState.QUEUED, "PENDING"), status("7+1", JobState.HELD, "PENDING")]
    )
    assert job.state == JobState.HELD


@pytest.mark.parametrize("job_id", ["93", "93+", "+1", "93+x", "93_1", "93+1.batch", ""])
def test_only_leader_plus_offset_is_a_component_id(job_id: str) -> None:
    assert hetjob.split(job_id) is None


def test_component_ids_split_into_leader_and_offset() -> None:
    assert hetjob.split("93+12") == ("93", 12)


# ---- restart: scontrol requeue ------------------------------------------------------------


def test_requeue_lifts_the_delay_only_after_the_earlier_run_left_its_nodes() -> None:
    """Each component COMPLETING first, then PENDING: only then `StartTime=now`."""
    transport = (
        ScriptedTransport()
        .on("scontrol", "requeue", reply=Answer())
        .on("squeue", reply=Answer("COMPLETING\nPENDING\n"), times=2)
        .on("squeue", reply=Answer("PENDING\nPENDING\n"))
        .on("scontrol", "update", reply=Answer())
    )
    assert SlurmBatch(transport).requeue("41") == "scontrol requeue 41"
    assert [call.argv for call in transport.calls] == [
        ("scontrol", "requeue", "41"),
        ("squeue", "-h", "-j", "41", "-o", "%T"),
        ("squeue", "-h", "-j", "41", "-o", "%T"),
        ("squeue", "-h", "-j", "41", "-o", "%T"),
        ("scontrol", "update", "JobId=41", "StartTime=now"),
    ]


def test_requeue_keeps_slurms_delay_when_the_run_does_not_leave_in_time() -> None:
    transport = (
        ScriptedTransport()
        .on("scontrol", "requeue", reply=Answer())
        .on("squeue", reply=Answer("COMPLETING\n"))
    )
    words = SlurmBatch(transport, settle_seconds=0.6).requeue("41")
    assert words.startswith("scontrol requeue 41 (the earlier run is still leaving its nodes")
    assert "update" not in [call.argv[1] for call in transport.calls]


def test_requeue_refused_keeps_slurms_words() -> None:
    transport = ScriptedTransport().on(
        "scontrol",
        "requeue",
        reply=Answer("", "Requeue of JobId=41 returned an error: Invalid job id specified\n", 1),
    )
    with pytest.raises(RestartError) as caught:
        SlurmBatch(transport).requeue("41")
    assert "Invalid job id specified" in str(caught.value)
    assert caught.value.argv == ["scontrol", "requeue", "41"]
